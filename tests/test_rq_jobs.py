"""RQ on a real redis-server: jobs travel as JSON, and the worker runs only the project's job function."""
import json
import zlib

import pytest
from redis import Redis
from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer

from core.queue import RQQueue

pytestmark = pytest.mark.redis

calls: list[str] = []


def project_job(document_id: str) -> str:
    calls.append(document_id)
    return document_id


def test_the_worker_runs_the_project_job_and_refuses_any_other_function(redis_url):
    name = "test-allow"
    queue = RQQueue(project_job, redis_url, name, timeout_s=30, retries=0)
    queue.rq_queue.empty()
    good = queue.enqueue("doc-1", 0)
    # Someone with access to Redis writes a job naming another function (JSON: no pickle needed).
    raw = Queue(name, connection=Redis.from_url(redis_url), serializer=JSONSerializer)
    evil = raw.enqueue_call("os.getcwd", job_id="evil")
    worker = SimpleWorker([queue.rq_queue], connection=queue.redis, serializer=JSONSerializer,
                          job_class=queue.job_class)
    worker.work(burst=True)
    assert calls == ["doc-1"]
    assert queue.rq_queue.fetch_job(good).get_status() == "finished"
    failed = queue.rq_queue.fetch_job(evil.id)
    assert failed.get_status() == "failed" and "refused job function 'os.getcwd'" in failed.latest_result().exc_string
    stored = zlib.decompress(queue.redis.hget(f"rq:job:{good}", "data"))
    assert json.loads(stored)[0] == "tests.test_rq_jobs.project_job"  # JSON in Redis, not a pickle
