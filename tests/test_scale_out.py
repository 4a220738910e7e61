"""Scale-out on one machine (tiny model): two API processes and two workers on one redis-server and one data folder;
then two APIs and three workers that share no folder (PostgreSQL, an S3 server, Redis)."""
from __future__ import annotations

import signal
import time

import httpx
import pytest

from core.settings import Settings
from core.storage import open_versions
from service.client import wait_for_document
from tests.conftest import Proc, Server, emptied, tiny_env
from tests.test_crashes import FACTS, assert_each_document_committed_once, fact, teach

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


def test_two_apis_and_two_workers_share_one_redis_and_one_data_folder(tiny_model_dir, redis_url, tmp_path):
    """Records in SQLite in the data folder (PostgreSQL: the next test)."""
    data = tmp_path / "data"
    env = tiny_env(tiny_model_dir, CKL_REDIS_URL=redis_url, CKL_QUEUE_NAME=f"scale-{time.monotonic_ns()}")
    apis = [Server(data, env), Server(data, env)]
    workers = [Proc(["worker"], apis[0].env, tmp_path / f"worker-{i}.log") for i in (1, 2)]
    try:
        start_all(apis, workers, redis_url, env["CKL_QUEUE_NAME"])
        ids = [teach(apis[i % 2].url, body) for i, body in enumerate(FACTS)]  # through either API
        records = [wait_for_document(apis[(i + 1) % 2].url, d, timeout_s=240) for i, d in enumerate(ids)]
        assert [r["status"] for r in records] == ["committed"] * 3, (records, [w.tail() for w in workers])
        manifests = assert_each_document_committed_once(data, ids)  # no two commits share a parent
        newest = max(m["version"] for m in manifests)
        first_served(apis, newest)  # both swap the newest version in and answer each taught prompt from it alike
        answer_alike(apis, FACTS, newest)
        assert (data / "ckl.db").exists()  # the records are where the default says
        ran = [sum(d in w.log.read_text() for d in ids) for w in workers]
        assert all(ran), f"each worker should have taken a job: {ran}"
    finally:
        for process in [*workers, *apis]:
            process.kill(signal.SIGTERM)


def start_all(apis: list[Server], workers: list[Proc], redis_url: str, queue: str) -> None:
    """Every process started; returns once the APIs are ready and every worker listens on `queue`."""
    for process in [*apis, *workers]:
        process.start()
    for api in apis:
        api.wait_ready(120)
    wait_for_workers(redis_url, queue, len(workers))


def answer_alike(apis: list[Server], bodies: list[dict], version: int) -> None:
    """Each API answers each taught prompt from `version`, and all of them alike."""
    for body in bodies:
        first, second = (answer(api.url, body["probes"][0]["prompt"]) for api in apis)
        assert first["text"] == second["text"] and first["knowledge_version"] == version


def first_served(apis: list[Server], version: int, timeout_s: float = 30) -> list[float]:
    """When each API first said it serves `version` (polled every 50 ms)."""
    served: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while len(served) < len(apis):
        assert time.monotonic() < deadline, f"not every API serves version {version}: {served}"
        for api in apis:
            if api.url not in served and httpx.get(f"{api.url}/ready").json()["knowledge_version"] == version:
                served[api.url] = time.time()
        time.sleep(0.05)
    return list(served.values())


def test_two_apis_and_three_workers_with_no_shared_folder_lose_nothing_when_one_of_each_is_killed(
        tiny_model_dir, redis_url, tmp_path, postgres_url, object_store_url):
    """Each process has a data folder of its own (caches only): records, versions and probe suites in PostgreSQL,
    deltas in an S3 server (moto's, over HTTP), the queue in Redis; the workers learn at once. A worker
    killed while it trains (and started again, as an orchestrator does) and an API killed mid-request lose no
    accepted document, and every API serves a new version within 2 s of its commit."""
    env = tiny_env(tiny_model_dir, CKL_REDIS_URL=redis_url, CKL_QUEUE_NAME=f"apart-{time.monotonic_ns()}",
                   CKL_DATABASE_URL=emptied(postgres_url), CKL_OBJECT_STORE_URL=object_store_url, CKL_JOB_RETRIES="3")
    for name in ("api-1", "api-2"):
        (tmp_path / name).mkdir()
    apis = [Server(tmp_path / f"api-{i}" / "data", env) for i in (1, 2)]

    def worker(name: str, **extra: str) -> Proc:
        return Proc(["worker"], {**apis[0].env, "CKL_DATA_DIR": str(tmp_path / name / "data"), **extra},
                    tmp_path / f"{name}.log")
    workers = [worker("worker-1", CKL_FAULT_KILL_AT="training"), worker("worker-2"), worker("worker-3")]
    try:
        start_all(apis, workers, redis_url, env["CKL_QUEUE_NAME"])
        bodies = [*FACTS, fact("velmaro", "tosk"), fact("brannoch", "ilse")]
        ids = [teach(apis[i % 2].url, body) for i, body in enumerate(bodies)]
        assert workers[0].popen.wait(120) == -signal.SIGKILL  # killed with a document in training
        workers[0] = worker("worker-1-again").start()  # re-queues what it left

        body = {"prompt": "the capital of", "max_new_tokens": 200, "stream": True}
        with httpx.stream("POST", f"{apis[1].url}/generate", json=body, timeout=30) as streaming:
            lines = streaming.iter_lines()
            next(lines)  # the first event came: the API is in the middle of the request
            apis[1].kill(signal.SIGKILL)
            with pytest.raises(httpx.TransportError):
                for _ in lines:
                    pass
        apis[1] = Server(tmp_path / "api-2" / "data", env).start()
        apis[1].wait_ready(120)

        records = [wait_for_document(apis[i % 2].url, d, timeout_s=300) for i, d in enumerate(ids)]
        assert [r["status"] for r in records] == ["committed"] * len(ids), (records, [w.tail() for w in workers])
        store = open_versions(Settings(data_dir=tmp_path / "checker", database_url=postgres_url,
                                       object_store_url=object_store_url))
        assert_each_document_committed_once(store, ids)  # one version each, no two from one parent

        version = wait_for_document(apis[0].url, teach(apis[0].url, fact("ostrel", "kell")), timeout_s=120)["version"]
        committed_at = store.manifest(version)["created_at"]
        assert all(at - committed_at <= 2.0 for at in first_served(apis, version)), committed_at
        answer_alike(apis, bodies, version)  # from the same deltas, fetched from the object store
        for folder in tmp_path.glob("*/data"):  # nothing shared through a folder: no versions, no suites there
            assert not (folder / "versions").exists() and not (folder / "probes").exists(), folder
    finally:
        for process in [*workers, *apis]:
            process.kill(signal.SIGTERM)
