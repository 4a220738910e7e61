"""Attacks through real HTTP on a live `ckl serve` (tiny model, keys on), with raw sockets where the attack is
in the bytes: a smuggled body length, clients that open a stream and vanish, invented methods, huge version
numbers. Each holds the server's memory and its generation slots where they were."""
from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.keys import hash_key
from service.rate_limit import REFUSED_COST
from tests.conftest import Server, tiny_env

KEYS = {"asker": ["generate"], "root": ["admin"], "hammer": ["generate"], "prober": ["generate"]}
RATE, BURST = 20, 100  # CKL_LIMITS_REQUESTS_PER_S and CKL_LIMITS_REQUEST_BURST by default
CAP = 16384
SLOTS = 2  # one decoding, one waiting


def auth(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer key-of-{name}"}


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    keys = [{"name": n, "sha256": hash_key(f"key-of-{n}"), "scopes": s} for n, s in KEYS.items()]
    data = tmp_path_factory.mktemp("abuse") / "data"
    srv = Server(data, tiny_env(tiny_model_dir, CKL_API_KEYS=json.dumps(keys), CKL_LIMITS_MAX_BODY_BYTES=str(CAP),
                                CKL_LIMITS_MAX_CONCURRENT_GENERATIONS="1", CKL_LIMITS_MAX_WAITING_GENERATIONS="1",
                                CKL_LIMITS_MAX_NEW_TOKENS_CAP="4000")).start()
    srv.wait_ready(120)
    yield srv
    srv.kill()


def raw(server: Server, request: bytes, silence_s: float = 5) -> bytes:
    """Send `request` as it is; the whole answer (up to the server closing or `silence_s` of silence)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=silence_s) as s:
        s.sendall(request)
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and answer.endswith(b"}"):
                    break
        except TimeoutError:
            pass
        return answer


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_a_body_with_both_lengths_is_refused_before_it_is_read(server):
    head = ("POST /documents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    chunk = b"x" * 65536
    answer = raw(server, head + b"%x\r\n" % len(chunk) + chunk + b"\r\n")
    assert status(answer) == 400 and b"ambiguous_length" in answer


def test_a_chunked_body_is_counted_as_it_arrives_and_stopped_at_the_cap(server):
    head = (b"POST /documents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * 2 * CAP
    answer = raw(server, head + b"%x\r\n" % len(chunk) + chunk + b"\r\n")  # more to come, never sent
    assert status(answer) == 413 and b"too_large" in answer


def test_streams_opened_and_abandoned_give_their_slots_back(server):
    body = json.dumps({"prompt": "the capital of", "max_new_tokens": 4000, "stream": True}).encode()
    request = (b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Authorization: Bearer key-of-asker\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    for _ in range(5 * SLOTS):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(request)  # and gone before reading a byte
    deadline = time.monotonic() + 30
    while True:
        r = httpx.post(f"{server.url}/generate", json={"prompt": "hi", "max_new_tokens": 2}, headers=auth("asker"),
                       timeout=60)
        if r.status_code == 200:
            break
        assert r.status_code == 429 and time.monotonic() < deadline, "slots were never given back"
        time.sleep(0.5)
    metrics = httpx.get(f"{server.url}/metrics", headers=auth("root")).text
    assert "ckl_generated_tokens" in metrics and "\nckl_generations_admitted 0.0\n" in metrics  # none left held


def test_invented_methods_count_as_other_and_do_not_grow_the_metrics(server):
    def scrape() -> str:
        return httpx.get(f"{server.url}/metrics", headers=auth("root")).text
    scrape()
    for n in range(200):
        raw(server, f"INVENTED{n} /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    text = scrape()
    assert "INVENTED" not in text
    grown = len(text)
    for n in range(200, 400):
        raw(server, f"INVENTED{n} /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    assert len(scrape()) <= grown + 200  # the counts change, not the number of series


@pytest.mark.parametrize("digits", [300, 5000])
def test_huge_version_numbers_are_404s(server, digits):
    number = "9" * digits
    r = httpx.post(f"{server.url}/v1/completions", json={"model": f"ckl-v{number}", "prompt": "hi", "max_tokens": 1},
                   headers=auth("asker"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = httpx.post(f"{server.url}/versions/{number}/activate", json={}, headers=auth("root"))
    assert r.status_code in (404, 422) and "error" in r.json()
    assert httpx.get(f"{server.url}/versions", headers=auth("root")).json()["current"] == 0


def test_a_key_past_its_rate_gets_429s_and_no_other_key_or_health_check_does(server):
    started, answers = time.monotonic(), []
    with httpx.Client(headers=auth("hammer")) as client:
        while len(answers) < BURST + 40:
            answers.append(client.get(f"{server.url}/v1/models"))
    elapsed = time.monotonic() - started
    refused = [a for a in answers if a.status_code == 429]
    assert refused and {a.status_code for a in answers} == {200, 429}
    assert refused[0].json()["error"]["code"] == "rate_limited" and int(refused[0].headers["retry-after"]) >= 1
    assert len(answers) - len(refused) <= BURST + RATE * elapsed + 1  # the bucket's refill, no more
    assert httpx.get(f"{server.url}/v1/models", headers=auth("asker")).status_code == 200  # another key's own bucket
    assert httpx.get(f"{server.url}/health").status_code == 200  # never limited


def test_a_key_whose_requests_are_refused_is_slowed_sooner_than_one_whose_are_answered(server):
    started, answers = time.monotonic(), []
    with httpx.Client(headers=auth("prober")) as client:
        while len(answers) < BURST // REFUSED_COST + 20:
            answers.append(client.post(f"{server.url}/generate", json={"prompt": "hi", "max_new_tokens": -1}))
    elapsed = time.monotonic() - started
    refused = [a for a in answers if a.status_code == 422]
    limited = [a for a in answers if a.status_code == 429]
    assert refused and limited and len(refused) + len(limited) == len(answers)
    assert limited[0].json()["error"]["code"] == "rate_limited"
    assert len(refused) <= (BURST + RATE * elapsed) / REFUSED_COST + 1  # each refusal drew its cost
    assert httpx.get(f"{server.url}/v1/models", headers=auth("asker")).status_code == 200  # another key's own bucket


def test_the_schema_needs_a_key_and_ready_says_nothing_about_the_machine(server):
    assert httpx.get(f"{server.url}/openapi.json").status_code == 401
    assert httpx.get(f"{server.url}/docs").status_code == 401
    assert "/generate" in httpx.get(f"{server.url}/openapi.json", headers=auth("asker")).json()["paths"]
    ready = httpx.get(f"{server.url}/ready").json()
    assert set(ready) == {"ready", "knowledge_version"}


METHODS = st.sampled_from(["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD", "BREW", "X" * 40])
PATHS = st.sampled_from(["/generate", "/documents", "/documents/{n}", "/versions/{n}/activate", "/v1/completions",
                         "/v1/models", "/health", "/metrics", "/documents?limit={n}", "/probes"])
LENGTH_HEADERS = st.lists(st.sampled_from([
    "Content-Length: 5", "Content-Length: -1", "Content-Length: 99999999999999999999", "Content-Length: 0x10",
    "Transfer-Encoding: chunked", "Transfer-Encoding: gzip, chunked", "Transfer-Encoding: identity",
    "Content-Type: application/json", "Content-Type: text/plain", "Authorization: Bearer key-of-root"]),
    max_size=4, unique=True)


@settings(max_examples=60, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(method=METHODS, path=PATHS, headers=LENGTH_HEADERS, number=st.integers(0, 10**60), body=st.binary(max_size=64))
def test_raw_requests_with_any_lengths_methods_and_ids_never_get_a_5xx(server, method, path, headers, number, body):
    head = f"{method} {path.format(n=number)} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    answer = raw(server, (head + "".join(f"{h}\r\n" for h in headers) + "\r\n").encode() + body, silence_s=1)
    if answer.startswith(b"HTTP/1.1 "):
        assert status(answer) < 500, answer[:300]
    assert httpx.get(f"{server.url}/health").status_code == 200
