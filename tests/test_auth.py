"""Access and admission on the tiny model: API keys with scopes on every route, owners of documents, the
Host allowlist, the body cap, JSON-only POSTs, request ids, and the server's refusal to listen open."""
import re
import threading

import pytest
from fastapi.routing import APIRoute

from ckl import cli
from ckl.cli import binding_refusal
from core.keys import KeyConfig, hash_key
from service.auth import ANY_KEY
from service.middleware import host_name
from tests.api_app import tiny_client, tiny_settings
from tests.test_batching import until

KEYS = {"asker": ["generate"], "teacher": ["teach"], "other": ["teach"], "root": ["admin"]}
# The console's files are code without data (every datum comes from the API, with a key).
PUBLIC = {"/health", "/ready", "/console", "/console/console.js", "/console/console.css"}
FACT = {"text": "the capital of veltoria is marnhold", "probes": [{"prompt": "the capital of veltoria is",
                                                                   "answer": "marnhold"}]}


def auth(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer key-of-{name}"}


@pytest.fixture
def keyed(tmp_path):
    keys = [KeyConfig(name=n, sha256=hash_key(f"key-of-{n}"), scopes=s) for n, s in KEYS.items()]
    with tiny_client(tiny_settings(tmp_path, api_keys=keys, max_body_bytes=4096)) as client:
        yield client


def route_scope(route: APIRoute) -> list[str]:
    return [d.call.scope for d in route.dependant.dependencies if hasattr(d.call, "scope")]


def test_every_route_but_health_and_ready_needs_a_key_with_its_scope(keyed):
    routes = [r for r in keyed.app.routes if isinstance(r, APIRoute)]
    assert {r.path for r in routes} >= PUBLIC | {"/generate", "/documents", "/versions"}
    for route in routes:
        if route.path in PUBLIC:
            assert route_scope(route) == [] and keyed.get(route.path).status_code in (200, 503)
            continue
        (scope,) = route_scope(route)  # exactly one access rule: a new route cannot be forgotten
        path = route.path.replace("{version}", "0").replace("{document_id}", "abc")
        for method in route.methods:
            r = keyed.request(method, path, json={} if method == "POST" else None)
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", (method, path)
            assert r.headers["www-authenticate"] == "Bearer"
            if scope == ANY_KEY:  # no key lacks it
                assert keyed.request(method, path, headers=auth("asker")).status_code == 200, path
                continue
            wrong = {"generate": "teacher", "teach": "asker", "metrics": "teacher", "admin": "teacher"}[scope]
            r = keyed.request(method, path, json={} if method == "POST" else None, headers=auth(wrong))
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", (method, path)
    r = keyed.post("/generate", json={"prompt": "hi", "max_new_tokens": 1}, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401


def test_a_teacher_sees_only_its_own_documents_and_an_admin_sees_all(keyed):
    r = keyed.post("/documents", json=FACT, headers=auth("teacher"))
    assert r.status_code == 202
    doc = r.json()["document_id"]
    assert keyed.get(f"/documents/{doc}", headers=auth("teacher")).json()["owner"] == "teacher"
    assert keyed.get(f"/documents/{doc}", headers=auth("other")).status_code == 404
    assert keyed.delete(f"/documents/{doc}", headers=auth("other")).status_code == 404
    assert keyed.get("/documents", headers=auth("other")).json()["total"] == 0
    assert keyed.get("/documents", headers=auth("root")).json()["total"] == 1
    assert keyed.get(f"/documents/{doc}", headers=auth("root")).status_code == 200
    assert keyed.post("/generate", json={"prompt": "hi", "max_new_tokens": 1}, headers=auth("root")).status_code == 200


def test_bodies_are_capped_json_only_and_every_answer_carries_a_request_id(keyed):
    big = {"text": "x" * 5000}
    r = keyed.post("/documents", json=big, headers=auth("teacher"))
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"

    def chunks():
        yield b'{"text": "'
        yield b"x" * 5000
        yield b'"}'
    r = keyed.post("/documents", content=chunks(), headers={**auth("teacher"), "content-type": "application/json"})
    assert r.status_code == 413
    r = keyed.post("/versions/0/activate", headers=auth("root"))  # no body: no state change
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    r = keyed.post("/versions/0/activate", data={"force": "true"}, headers=auth("root"))  # a cross-site form
    assert r.status_code == 415
    assert keyed.get("/documents", headers=auth("root")).json()["total"] == 0
    r = keyed.get("/health", headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    assert len(keyed.get("/health").headers["x-request-id"]) == 32
    assert len(keyed.get("/health", headers={"X-Request-ID": "bad id\t"}).headers["x-request-id"]) == 32


def test_an_open_server_answers_only_to_loopback_host_names(tmp_path):
    with tiny_client(tiny_settings(tmp_path)) as client:
        assert client.get("/health").status_code == 200
        r = client.get("/health", headers={"host": "attacker.example"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "host_not_allowed"
    assert [host_name(h) for h in ("127.0.0.1:8000", "[::1]:8000", "localhost", "::1")] == \
        ["127.0.0.1", "::1", "localhost", "::1"]


@pytest.mark.parametrize("body,field", [({"prompt": "hi", "seed": 2**63}, "seed"),
                                        ({"prompt": "hi", "temperature": 1e-38}, "temperature")])
def test_numbers_that_used_to_crash_generation_are_refused(tmp_path, body, field):
    with tiny_client(tiny_settings(tmp_path)) as client:
        r = client.post("/generate", json=body)
        assert r.status_code == 422 and r.json()["error"]["fields"][0]["field"] == field
        assert client.get("/documents/" + "a" * 300).status_code == 404


def test_the_server_refuses_to_listen_beyond_loopback_with_no_keys(tmp_path):
    open_wide = tiny_settings(tmp_path, host="0.0.0.0")
    assert "CKL_API_KEYS" in binding_refusal(open_wide)
    assert binding_refusal(tiny_settings(tmp_path)) is None
    assert binding_refusal(tiny_settings(tmp_path, host="0.0.0.0", allow_unauthenticated=True)) is None
    key = KeyConfig(name="k", sha256=hash_key("k"), scopes=["generate"])
    assert binding_refusal(tiny_settings(tmp_path, host="0.0.0.0", api_keys=[key])) is None


def test_metrics_count_requests_tokens_and_documents(keyed):
    keyed.post("/generate", json={"prompt": "hi", "max_new_tokens": 2}, headers=auth("asker"))
    keyed.get("/documents/unknown-id", headers=auth("root"))
    # Read before any document is taught: the embedded worker could commit a version at any moment after.
    text = keyed.get("/metrics", headers=auth("root")).text
    assert 'ckl_requests_total{method="POST",route="/generate",status="200"} 1.0' in text
    assert 'ckl_requests_total{method="GET",route="/documents/{document_id}",status="404"} 1.0' in text
    assert "ckl_generated_tokens_total 2.0" in text and "ckl_generate_first_token_seconds_count 1.0" in text
    assert "ckl_knowledge_version 0.0" in text and "ckl_nf_accuracy 1.0" in text
    assert "ckl_swap_pause_seconds_count 1.0" in text  # version 0, installed at start
    assert "ckl_documents{" not in text and "ckl_job_gate_seconds_count 0.0" in text
    keyed.post("/documents", json=FACT, headers=auth("teacher"))
    text = keyed.get("/metrics", headers=auth("root")).text
    counts = [float(v) for v in re.findall(r'^ckl_documents\{status="\w+"\} (\S+)$', text, re.MULTILINE)]
    assert counts and sum(counts) == 1.0


def test_metrics_turned_off_count_nothing_and_answer_404(tmp_path):
    with tiny_client(tiny_settings(tmp_path, metrics=False)) as client:
        assert client.post("/generate", json={"prompt": "hi", "max_new_tokens": 2}).status_code == 200
        r = client.get("/metrics")
        assert r.status_code == 404 and "CKL_METRICS" in r.json()["error"]["message"]
        assert client.app.state.runtime is not None


def test_access_lines_and_json_logs_carry_the_request_id(tmp_path, caplog):
    import json
    import logging

    from core import logs

    with tiny_client(tiny_settings(tmp_path, access_log=True)) as client, caplog.at_level(logging.INFO, "ckl.access"):
        client.get("/health", headers={"X-Request-ID": "req-7"})
    (line,) = [r for r in caplog.records if r.name == "ckl.access"]
    assert line.fields == {"method": "GET", "route": "/health", "status": 200, "ms": line.fields["ms"]}
    token = logs.request_id.set("req-8")
    try:
        entry = json.loads(logs.JsonFormatter().format(logging.LogRecord("x", logging.WARNING, "", 0, "hello", (), None)))
    finally:
        logs.request_id.reset(token)
    assert entry["message"] == "hello" and entry["request_id"] == "req-8" and entry["level"] == "warning"


def test_queued_documents_and_must_keep_probes_are_capped(tmp_path):
    """The job function is a stand-in for a slow worker: it waits until the test lets it go."""
    import threading
    import time

    from fastapi.testclient import TestClient

    from service.app import create_app
    from serving.runtime import Runtime
    from tests.tiny import tiny_loaded

    release = threading.Event()
    settings = tiny_settings(tmp_path, max_queued_documents=1, max_must_keep_probes=2)
    runtime = Runtime.create(settings, run_job=lambda doc_id: release.wait(30), load=tiny_loaded)
    with TestClient(create_app(runtime), base_url="http://127.0.0.1") as client:
        while client.get("/ready").status_code != 200:
            time.sleep(0.05)
        assert client.post("/documents", json=FACT).status_code == 202
        r = client.post("/documents", json={**FACT, "text": "the capital of veltoria is marnhold, another fact"})
        assert r.status_code == 429 and r.headers["retry-after"] == "30"
        assert client.get("/documents").json()["total"] == 1  # the refused one stored nothing
        release.set()
        probes = [{"prompt": f"p{i}", "answer": "a"} for i in range(3)]
        assert client.post("/probes", json={"probes": probes[:2]}).status_code == 201
        r = client.post("/probes", json={"probes": probes[2:]})
        assert r.status_code == 422 and "cap of 2" in r.json()["error"]["message"]
        r = client.request("DELETE", "/probes", json={"probes": probes[:1]})
        assert r.json()["must_keep"] == probes[1:2]
        assert client.post("/probes", json={"probes": probes[2:]}).status_code == 201


def test_idempotency_keys_of_two_api_keys_never_meet_whatever_their_names(tmp_path):
    names = {"team:a": "k", "team": "a:k"}  # "user:team:a:k" both, were the parts joined with colons
    keys = [KeyConfig(name=n, sha256=hash_key(f"key-of-{n}"), scopes=["teach"]) for n in names]
    with tiny_client(tiny_settings(tmp_path, api_keys=keys)) as client:
        ids = [client.post("/documents", json={**FACT, "idempotency_key": key}, headers=auth(name)).json()
               for name, key in names.items()]
        assert ids[0]["document_id"] != ids[1]["document_id"], ids


def test_a_teacher_refused_for_a_must_keep_probe_is_not_told_its_answer(keyed):
    kept = {"probes": [{"prompt": "the capital of veltoria is", "answer": "dorvane"}]}
    assert keyed.post("/probes", json=kept, headers=auth("root")).status_code == 201
    for name, shown in (("teacher", False), ("root", True)):
        refused = keyed.post("/documents", json=FACT, headers=auth(name))
        assert refused.status_code == 422 and refused.json()["error"]["fields"][0]["rule"] == "contradicts_must_keep"
        assert ("dorvane" in refused.text) is shown



def test_a_teach_key_for_the_shared_namespace_must_be_asked_for(capsys):
    """`ckl keys new` with teach scope and no namespace would teach what every tenant's prompts reach: refused
    unless --shared says so."""
    with pytest.raises(SystemExit, match="--shared"):
        cli.main(["keys", "new", "--name", "app", "--scopes", "generate,teach"])
    for args in (["--scopes", "generate,teach", "--shared"], ["--scopes", "generate,teach", "--namespace", "acme"],
                 ["--scopes", "generate"]):
        cli.main(["keys", "new", "--name", "app", *args])
        assert '"sha256"' in capsys.readouterr().out


def test_a_preview_waits_out_its_share_of_the_decoder_while_answers_decode(tmp_path):
    """After each window of phi's pass over a previewed text, the preview waits while other answers decode until it
    has taken no more than its share of the decoder (here almost none: it waits for the answer to end); with
    nothing decoding it does not wait."""
    from tests.tiny import tiny_loaded
    from workers.train_attention import phi

    model = tiny_loaded().model
    config = phi.PhiConfig(layers=(1, 2), hidden_size=model.config.hidden_size, window=6, overlap=2, head="attention")
    phi.save_checkpoint(tmp_path / "phi", phi.make_head(config), {"base_model": phi.fingerprint(model)})
    keys = [KeyConfig(name="previewer", sha256=hash_key("key-of-previewer"), scopes=["teach"]),
            KeyConfig(name="reader", sha256=hash_key("key-of-reader"), scopes=["generate"])]
    settings = tiny_settings(tmp_path, api_keys=keys, prefill_share=1e-9, phi_checkpoint=tmp_path / "phi")
    with tiny_client(settings) as client:
        text = {"text": "the capital of veltoria is marnhold. " * 4, "weighting": "uniform"}
        previewer = {"Authorization": "Bearer key-of-previewer"}
        assert client.post("/documents/preview", json=text, headers=previewer).status_code == 200  # nothing decodes
        ended: list[float] = []
        reader = {"Authorization": "Bearer key-of-reader"}
        answer = threading.Thread(target=lambda: ended.append(client.post(
            "/generate", json={"prompt": "the sky is", "max_new_tokens": 400}, headers=reader).status_code))
        answer.start()
        until(client.app.state.generations.decoding)
        previewed = client.post("/documents/preview", json=text, headers=previewer).status_code
        answered_first = list(ended)
        answer.join(60)
    assert previewed == 200 and ended == [200]
    assert answered_first == [200]  # the answer ended first: the preview waited for it after its first window
