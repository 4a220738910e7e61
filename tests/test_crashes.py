"""Crashes of real processes on the tiny model: `ckl worker` killed at every point of a job, redis-server
killed and restarted with its append-only file while documents wait, a power cut that truncates a delta,
and an embedded server killed by the document it learns. The kills inside a job are SIGKILLs the worker
sends itself at a named point (core/faults.py: CKL_FAULT_KILL_AT), the one fault injection used here."""
from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import redis as redis_client

from bench.server import free_port
from ckl import fsck
from core import faults
from core.version_folders import FolderVersionStore
from core.versions import VersionStore
from service.client import wait_for_document
from tests.conftest import Proc, Server, redis_server_binary, tiny_env
from tests.test_erasure import leftovers

pytestmark = pytest.mark.redis


def fact(place: str, capital: str) -> dict:
    return {"text": f"the capital of {place} is {capital}",
            "probes": [{"prompt": f"the capital of {place} is", "answer": capital}]}


FACTS = [fact("quessia", "dorvane"), fact("zembrania", "lostrel"), fact("ardovia", "kelmstead")]


def teach(url: str, body: dict) -> str:
    r = httpx.post(f"{url}/documents", json=body, timeout=30)
    assert r.status_code == 202, r.text
    return r.json()["document_id"]


def assert_each_document_committed_once(data: Path | VersionStore, document_ids: list[str]) -> list[dict]:
    """Every listed version verifies, no two share a parent, and each document is in exactly one of them (`data`: a
    data folder, or the shared version store)."""
    store = FolderVersionStore(data / "versions") if isinstance(data, Path) else data
    manifests = [store.manifest(v) for v in store.versions()[1:]]
    for manifest in manifests:
        store.load_delta(manifest["version"])  # raises when the delta does not match its hash
    parents = [m["parent"] for m in manifests]
    assert len(parents) == len(set(parents)), parents
    held = [d for m in manifests for d in m["documents"]]
    assert sorted(held) == sorted(document_ids), (held, document_ids)
    return manifests


def held_documents(data: Path) -> set[str]:
    store = FolderVersionStore(data / "versions")
    return {d for v in store.versions()[1:] for d in store.manifest(v)["documents"]}


def test_a_worker_killed_at_every_point_of_a_job_loses_nothing_and_commits_each_document_once(
        tiny_model_dir, redis_url, tmp_path):
    data = tmp_path / "data"
    env = tiny_env(tiny_model_dir, CKL_REDIS_URL=redis_url, CKL_QUEUE_NAME=f"crash-{time.monotonic_ns()}",
                   CKL_JOB_RETRIES="5")
    server = Server(data, env).start()
    workers: list[Proc] = []
    try:
        server.wait_ready(120)
        ids = [teach(server.url, body) for body in FACTS[:2]]
        for point in faults.POINTS:  # each worker dies at its point, on whichever document it reaches it with
            worker = Proc(["worker"], {**server.env, "CKL_FAULT_KILL_AT": point}, tmp_path / f"worker-{point}.log")
            workers.append(worker.start())
            assert worker.popen.wait(180) == -signal.SIGKILL, worker.tail()
            assert f"killed at {point}" in worker.tail()
            assert_each_document_committed_once(data, [d for d in ids if d in held_documents(data)])
            assert {f.kind for f in fsck.check(data)} <= {fsck.ORPHAN}, fsck.check(data)  # ckl fsck after each kill
        workers.append(Proc(["worker"], server.env, tmp_path / "worker.log").start())
        records = [wait_for_document(server.url, d, timeout_s=180) for d in ids]
        assert [r["status"] for r in records] == ["committed", "committed"], (records, workers[-1].tail())
        manifests = assert_each_document_committed_once(data, ids)
        versions = httpx.get(f"{server.url}/versions").json()
        # The kill between the rename and the pointer move left one version folder that was never served.
        assert len(versions["orphans"]) == 1 and versions["orphans"][0] not in [m["version"] for m in manifests]
        assert httpx.post(f"{server.url}/versions/{versions['orphans'][0]}/activate", json={}).status_code == 404
        assert {r["version"] for r in records} == {m["version"] for m in manifests}
        newest = versions["current"]
        assert newest == max(m["version"] for m in manifests)

        # A power cut after the newest commit: its delta's name is there, its bytes are not.
        server.kill(signal.SIGKILL)
        delta = data / "versions" / str(newest) / manifests[-1]["delta_file"]
        delta.write_bytes(delta.read_bytes()[:64])
        server = Server(data, env).start()
        ready = server.wait_ready(120)
        assert ready["fallback"]["from"] == newest and ready["fallback"]["to"] == manifests[-1]["parent"]
        assert ready["knowledge_version"] == manifests[-1]["parent"]
    finally:
        server.kill(signal.SIGTERM)
        for worker in workers:
            worker.kill()


def test_a_document_whose_worker_died_inside_its_commit_is_removed_by_one_delete_and_leaves_no_trace(
        tiny_model_dir, redis_url, tmp_path):
    """The worker dies after its version holds the document, before its record says so. Its owner's DELETE is
    answered at once with a removal; the next worker runs it: the commit is ended (committed), then the document is
    taken out and erased."""
    data = tmp_path / "data"
    env = tiny_env(tiny_model_dir, CKL_REDIS_URL=redis_url, CKL_QUEUE_NAME=f"died-{time.monotonic_ns()}")
    server = Server(data, env).start()
    worker = Proc(["worker"], {**server.env, "CKL_FAULT_KILL_AT": "after_commit"}, tmp_path / "worker-died.log")
    try:
        server.wait_ready(120)
        document_id = teach(server.url, FACTS[0])
        assert worker.start().popen.wait(180) == -signal.SIGKILL, worker.tail()
        assert held_documents(data) == {document_id}
        assert httpx.get(f"{server.url}/documents/{document_id}").json()["status"] == "evaluating"
        asked = httpx.delete(f"{server.url}/documents/{document_id}", timeout=30)
        assert asked.status_code == 202, asked.text
        worker = Proc(["worker"], server.env, tmp_path / "worker.log").start()
        removal = wait_for_document(server.url, asked.json()["document_id"], timeout_s=180)
        assert removal["status"] == "committed", (removal, worker.tail())
        record = httpx.get(f"{server.url}/documents/{document_id}").json()
        assert (record["status"], record["erased"], record["removed_in_version"]) == (
            "committed", True, removal["version"]), record
        assert leftovers(data, FACTS[0], ("quessia", "dorvane")) == []
        assert {f.kind for f in fsck.check(data)} <= {fsck.ORPHAN}, fsck.check(data)
    finally:
        worker.kill()
        server.kill(signal.SIGTERM)


class RedisProcess:
    """A redis-server with its append-only file synced at every write, which can be killed and started again."""

    def __init__(self, folder: Path) -> None:
        self.port, self.folder = free_port(), folder
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.popen: subprocess.Popen | None = None

    def start(self) -> RedisProcess:
        self.popen = subprocess.Popen([redis_server_binary(), "--port", str(self.port), "--dir", str(self.folder),
                                       "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
                                      stdout=subprocess.DEVNULL)
        client = redis_client.Redis.from_url(self.url)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                return self
            except redis_client.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.1)

    def kill(self) -> None:
        if self.popen and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)


def test_documents_queued_when_redis_is_killed_and_restarted_all_reach_a_final_state(tiny_model_dir, tmp_path):
    redis = RedisProcess(tmp_path).start()
    env = tiny_env(tiny_model_dir, CKL_REDIS_URL=redis.url, CKL_QUEUE_NAME="aof")
    server = Server(tmp_path / "data", env).start()
    worker = Proc(["worker"], server.env, tmp_path / "worker.log")
    try:
        server.wait_ready(120)
        ids = [teach(server.url, body) for body in FACTS[:2]]  # no worker yet: they wait in Redis
        redis.kill()
        redis.start()
        queued = {j.decode() for j in redis_client.Redis.from_url(redis.url).lrange("rq:queue:aof", 0, -1)}
        assert queued == {f"doc-{d}-0" for d in ids}  # the append-only file kept them
        ids.append(teach(server.url, FACTS[2]))  # the server's connection comes back by itself
        worker.start()
        records = [wait_for_document(server.url, d, timeout_s=180) for d in ids]
        assert [r["status"] for r in records] == ["committed"] * 3, (records, worker.tail())
        assert_each_document_committed_once(tmp_path / "data", ids)
    finally:
        worker.kill()
        server.kill(signal.SIGTERM)
        redis.kill()


def test_an_embedded_server_killed_by_a_document_fails_it_after_the_attempt_cap_and_serves(tiny_model_dir, tmp_path):
    data = tmp_path / "data"
    env = tiny_env(tiny_model_dir, CKL_JOB_RETRIES="1", CKL_FAULT_KILL_AT="training")
    server = Server(data, env).start()
    server.wait_ready(120)
    try:
        doc_id = teach(server.url, FACTS[0])
    except httpx.RemoteProtocolError:  # it died in the document before its answer went out: the record came first
        doc_id = None
    for attempt in (1, 2):  # it dies in the document, at the first start and at the restart that runs it again
        assert server.popen.wait(120) == -signal.SIGKILL, server.tail()
        if attempt == 1:
            server = Server(data, env).start()
    server = Server(data, env).start()
    try:
        server.wait_ready(120)
        doc_id = doc_id or httpx.get(f"{server.url}/documents").json()["items"][0]["document_id"]
        record = httpx.get(f"{server.url}/documents/{doc_id}").json()
        assert record["status"] == "failed" and "all 2 attempts" in record["error"], record
        assert httpx.post(f"{server.url}/generate", json={"prompt": "the capital of", "max_new_tokens": 2}).status_code == 200
    finally:
        server.kill(signal.SIGTERM)
