"""Scale-out on one machine: two API processes and two workers, one redis-server, one data folder (tiny model)."""
from __future__ import annotations

import signal
import time

import httpx
import pytest

from service.client import wait_for_document
from tests.conftest import Proc, Server, tiny_env
from tests.test_crashes import FACTS, assert_each_document_committed_once, teach

pytestmark = pytest.mark.redis


def answer(url: str, prompt: str) -> dict:
    r = httpx.post(f"{url}/generate", json={"prompt": prompt, "max_new_tokens": 2}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def wait_for_workers(redis_url: str, queue: str, count: int, timeout: float = 120) -> None:
    from redis import Redis
    from rq import Queue, Worker

    connection = Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout
    while Worker.count(connection=connection, queue=Queue(queue, connection=connection)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} workers listen on {queue}"
        time.sleep(0.2)


def test_two_apis_and_two_workers_share_one_redis_and_one_data_folder(tiny_model_dir, redis_url, tmp_path,
                                                                     database_url):
    """Records in SQLite in the data folder, and in PostgreSQL (as machines that share a store would)."""
    data = tmp_path / "data"
    env = tiny_env(tiny_model_dir, CKL_REDIS_URL=redis_url, CKL_QUEUE_NAME=f"scale-{time.monotonic_ns()}",
                   **({"CKL_DATABASE_URL": database_url} if database_url else {}))
    apis = [Server(data, env), Server(data, env)]
    workers = [Proc(["worker"], apis[0].env, tmp_path / f"worker-{i}.log") for i in (1, 2)]
    try:
        for process in [*apis, *workers]:
            process.start()
        for api in apis:
            api.wait_ready(120)
        wait_for_workers(redis_url, env["CKL_QUEUE_NAME"], 2)
        ids = [teach(apis[i % 2].url, body) for i, body in enumerate(FACTS)]  # through either API
        records = [wait_for_document(apis[(i + 1) % 2].url, d, timeout_s=240) for i, d in enumerate(ids)]
        assert [r["status"] for r in records] == ["committed"] * 3, (records, [w.tail() for w in workers])
        manifests = assert_each_document_committed_once(data, ids)  # no two commits share a parent
        newest = max(m["version"] for m in manifests)
        for api in apis:  # both swap the newest version in and answer each taught prompt from it alike
            deadline = time.monotonic() + 30
            while answer(api.url, "the capital of").get("knowledge_version") != newest:
                assert time.monotonic() < deadline, api.tail()
                time.sleep(0.2)
        for body in FACTS:
            first, second = (answer(api.url, body["probes"][0]["prompt"]) for api in apis)
            assert first["text"] == second["text"] and first["knowledge_version"] == newest
        assert (data / "ckl.db").exists() == (database_url is None)  # the records are where the URL says
        ran = [sum(d in w.log.read_text() for d in ids) for w in workers]
        assert all(ran), f"each worker should have taken a job: {ran}"
    finally:
        for process in [*workers, *apis]:
            process.kill(signal.SIGTERM)
