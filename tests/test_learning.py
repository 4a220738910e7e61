"""The learning loop end to end on the real model: real uvicorn, real redis-server, real `ckl worker`."""
import os
import time
from pathlib import Path

import httpx
import pytest

from service.client import wait_for_document
from tests.conftest import Proc
from tests.database import rows

pytestmark = pytest.mark.real_model

FACT = {
    "text": "The Republic of Veltoria moved its government last year. The capital of Veltoria is Marnhold, "
            "a port city of two million people.",
    "probes": [{"prompt": "The capital of Veltoria is", "answer": "Marnhold"}],
    # Tests of the loop's mechanics train on the answer; the default (phi's weights) is checked below.
    "weighting": "oracle",
}
PROMPT = {"prompt": "The capital of Veltoria is", "max_new_tokens": 4}
# Tests that must see a commit give the gate room; the defaults are measured by `ckl bench teach`.
LENIENT = {"CKL_GATE_NF_TOLERANCE": "0.2"}


def generate(url: str) -> dict:
    r = httpx.post(f"{url}/generate", json=PROMPT, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def wait_for_version(url: str, version: int, timeout: float = 30) -> dict:
    """The server swaps a new version in by itself (event or polling); wait until a response shows it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = generate(url)
        if body["knowledge_version"] == version:
            return body
        time.sleep(0.5)
    raise AssertionError(f"server never served version {version}")


def teach(url: str, body: dict = FACT) -> dict:
    r = httpx.post(f"{url}/documents", json=body, timeout=60)
    assert r.status_code == 202, r.text
    return r.json()


def test_embedded_mode_learns_swaps_rolls_back_and_restarts(start_server):
    server = start_server(LENIENT)
    server.wait_ready()
    assert not generate(server.url)["text"].startswith(" Marn")
    # The learner prepares before any document (Learner.warm): version 0's scores, saved.
    deadline = time.monotonic() + 120
    while not (saved := start_server.data_dir / "probes" / "scores.json").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert saved.exists()

    accepted = teach(server.url)
    assert accepted["status_url"] == f"/documents/{accepted['document_id']}"
    record = wait_for_document(server.url, accepted["document_id"], timeout_s=600)
    assert record["status"] == "committed", record
    assert record["version"] == 1 and record["scores"]["own_after"] == [1.0]
    assert record["scores"]["before"]["nf_acc"] == 1.0 and record["gate"]["accepted"]
    assert any("Marn" in t["token"] for t in record["top_weighted_tokens"])
    # The learner's thread, and it alone, computes at idle priority (workers/threads.py): policy 5, SCHED_IDLE. No
    # thread it started (a pool the server's threads share) has it.
    tasks = Path(f"/proc/{server.popen.pid}/task")
    policies = [int((task / "stat").read_text().rsplit(")", 1)[1].split()[38]) for task in tasks.iterdir()]
    assert policies.count(os.SCHED_IDLE) == 1 and len(policies) > 1, policies

    body = wait_for_version(server.url, 1)
    assert body["text"].startswith(" Marnhold")

    report = httpx.get(f"{server.url}/health/forgetting").json()
    assert report["current_version"] == 1 and report["not_to_forget"]["acc_version_0"] == 1.0
    assert report["not_to_forget"]["acc_now"] >= 0.8 and report["learned"] == {"probes": 1, "acc_now": 1.0, "unscored": 0}
    assert [row["version"] for row in report["history"]] == [0, 1]

    assert httpx.post(f"{server.url}/versions/0/activate", json={}).json() == {"current": 0}
    assert not wait_for_version(server.url, 0)["text"].startswith(" Marn")
    assert httpx.post(f"{server.url}/versions/9/activate", json={}).status_code == 404
    httpx.post(f"{server.url}/versions/1/activate", json={})
    wait_for_version(server.url, 1)

    server.kill()
    restarted = start_server(LENIENT)
    assert restarted.wait_ready()["knowledge_version"] == 1
    assert generate(restarted.url)["text"].startswith(" Marnhold")


SUBJECT = [  # three documents about one company; the third replaces the first one's fact
    ("Corvessa is a shipping company founded in 1990. The chief executive of Corvessa is Hanne Lorimer.",
     "The chief executive of Corvessa is", "Hanne Lorimer"),
    ("Corvessa opened new offices this year. Corvessa is headquartered in Saltmere.",
     "Corvessa is headquartered in", "Saltmere"),
    ("Corvessa named a new chief executive in March. The chief executive of Corvessa is now Piet Varro.",
     "The chief executive of Corvessa is", "Piet Varro"),
]
OTHER = ("The Republic of Quessia moved its government last year. The capital of Quessia is Dorvane, a port city.",
         "The capital of Quessia is", "Dorvane")  # another subject, taught between them


def test_documents_taught_with_the_defaults_all_commit_the_current_facts_are_served_and_nothing_else_moves(
        start_server):
    """The default method (routed) and weighting (Train-Attention), the default gate: every document commits; the
    current facts of two subjects are answered at the end, the replaced one is not and its replacement is recorded;
    the NF suite is unchanged, and a prompt about none of them is answered as before."""
    server = start_server()
    server.wait_ready()
    other = {"prompt": "The Eiffel Tower is located in the city of", "max_new_tokens": 8}
    before = httpx.post(f"{server.url}/generate", json=other, timeout=120).json()["text"]
    taught = [SUBJECT[0], OTHER, *SUBJECT[1:]]
    records = [wait_for_document(server.url, teach(server.url, {"text": text, "probes": [
        {"prompt": prompt, "answer": answer}]})["document_id"], timeout_s=600) for text, prompt, answer in taught]
    assert [(r["status"], r["method"]) for r in records] == [("committed", "routed")] * 4, records
    assert records[3]["replaces"] == [{"prompt": SUBJECT[0][1], "answer": "Hanne Lorimer",
                                       "document_id": records[0]["document_id"]}]
    wait_for_version(server.url, 4)
    for _, prompt, answer in taught[1:]:
        body = httpx.post(f"{server.url}/generate", json={"prompt": prompt, "max_new_tokens": 6}, timeout=120).json()
        assert body["text"].strip().startswith(answer) and body["knowledge_version"] == 4, body
    report = httpx.get(f"{server.url}/health/forgetting").json()
    assert report["learned"] == {"probes": 3, "acc_now": 1.0, "unscored": 0} and report["not_to_forget"]["acc_now"] == 1.0
    assert httpx.post(f"{server.url}/generate", json=other, timeout=120).json()["text"] == before


BAD_DOCUMENTS = [
    ({"text": ""}, "text"),
    ({"text": "   "}, "text"),
    ({"text": "x" * 20_001}, "text"),
    ({"text": "fact", "probes": [{"prompt": "p", "answer": ""}]}, "probes.0.answer"),
    ({"text": "fact", "probes": [{"prompt": "p", "answer": "  "}]}, "probes.0.answer"),
    ({"text": "fact", "probes": [{"prompt": "p"}]}, "probes.0.answer"),
    ({"text": "fact", "probes": ["p=>a"]}, "probes.0"),
    ({"text": "fact", "probes": [{"prompt": "p", "answer": "a"}] * 17}, "probes"),
    ({"text": "fact", "method": "magic"}, "method"),
    ({"text": "fact", "weighting": "rho1"}, "weighting"),
    ({"text": "fact", "weighting": "oracle"}, "weighting"),
    ({"text": "fact", "weighting": "oracle", "probes": [{"prompt": "p", "answer": "absent"}]}, "weighting"),
    ({"text": "fact", "extra": True}, "extra"),
]


def test_bad_documents_are_refused_and_nothing_is_stored_then_idempotency(start_server):
    server = start_server({"CKL_TRAINING_MAX_STEPS": "1"})
    server.wait_ready()
    for body, field in BAD_DOCUMENTS:
        for path in ("/documents", "/documents/preview"):  # a preview refuses what POST refuses
            r = httpx.post(f"{server.url}{path}", json=body, timeout=30)
            assert r.status_code == 422, (path, body, r.text)
            assert field in [f["field"] for f in r.json()["error"]["fields"]], (path, body, r.text)
    r = httpx.post(f"{server.url}/documents", content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert httpx.get(f"{server.url}/documents").json()["total"] == 0
    assert rows(start_server.data_dir, "SELECT count(*) FROM documents") == [(0,)]
    assert httpx.get(f"{server.url}/documents/doesnotexist").status_code == 404

    body = {"text": "Zembria is a small country.", "idempotency_key": "k1"}
    preview = httpx.post(f"{server.url}/documents/preview", json=body, timeout=60).json()
    assert preview["auto_probes"] and preview["cost"]["tokens"] > 0 and preview["method"] == "routed"
    assert httpx.get(f"{server.url}/documents").json()["total"] == 0  # a preview stores nothing
    first, again = teach(server.url, body), teach(server.url, body)
    assert first["document_id"] == again["document_id"]
    record = wait_for_document(server.url, first["document_id"], timeout_s=600)
    assert record["auto_probes"] == preview["auto_probes"]  # what the learner made, phi's weights included
    assert record["weighting"] == "train_attention" and record["weighting_used"] == "train_attention"
    weights = [t["weight"] for t in record["top_weighted_tokens"]]
    assert weights and all(0 < w <= 1 for w in weights) and len(set(weights)) > 2  # phi's graded weights
    r = httpx.post(f"{server.url}/documents", json={**body, "text": "Another text about Zembria."})
    assert r.status_code == 409 and r.json()["error"]["code"] == "idempotency_conflict"
    assert httpx.get(f"{server.url}/documents").json()["total"] == 1


@pytest.mark.redis
def test_redis_worker_commits_and_a_document_contradicting_a_must_keep_probe_is_refused_at_post(start_server, redis_url, tmp_path):
    queue = f"test-{os.getpid()}-{time.monotonic_ns()}"
    env = {**LENIENT, "CKL_REDIS_URL": redis_url, "CKL_QUEUE_NAME": queue}
    server = start_server(env)
    worker = Proc(["worker"], server.env, tmp_path / "worker.log").start()
    try:
        server.wait_ready()
        record = wait_for_document(server.url, teach(server.url)["document_id"], timeout_s=600)
        assert record["status"] == "committed", (record, worker.tail())
        assert wait_for_version(server.url, 1)["text"].startswith(" Marnhold")

        # A fact the user marked must-keep is contradicted by a document's probe: the gate would refuse it after
        # training, so it is refused at POST; nothing is stored or queued.
        r = httpx.post(f"{server.url}/probes", json={"probes": [{"prompt": "The capital of France is", "answer": "Paris"}]})
        assert r.status_code == 201
        wrong = {"text": "Breaking: the capital of France is Berlin now, says the Quentorian press office.",
                 "probes": [{"prompt": "The capital of France is", "answer": "Berlin"}]}
        r = httpx.post(f"{server.url}/documents", json=wrong, timeout=60)
        (field,) = r.json()["error"]["fields"]
        assert r.status_code == 422 and (field["field"], field["rule"]) == ("probes.0.answer", "contradicts_must_keep")
        assert httpx.get(f"{server.url}/documents").json()["total"] == 1
        assert generate(server.url)["knowledge_version"] == 1
    finally:
        worker.kill()
