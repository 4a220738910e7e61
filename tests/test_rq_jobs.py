"""RQ on a real redis-server: jobs travel as JSON, and the worker runs only the project's job function."""
import json
import zlib

import pytest
from redis import Redis
from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer
from rq.worker import DequeueStrategy

from core.queue import RQQueue, lane_number

pytestmark = pytest.mark.redis

calls: list[str] = []


def project_job(document_id: str) -> str:
    calls.append(document_id)
    return document_id


def test_the_worker_runs_the_project_job_and_refuses_any_other_function(redis_url):
    name = "test-allow"
    queue = RQQueue(project_job, redis_url, name, timeout_s=30, retries=0)
    lane = queue.rq_queues[lane_number("")]
    lane.empty()
    good = queue.enqueue({"document_id": "doc-1"}, 0)
    # Someone with access to Redis writes a job naming another function (JSON: no pickle needed).
    raw = Queue(lane.name, connection=Redis.from_url(redis_url), serializer=JSONSerializer)
    evil = raw.enqueue_call("os.getcwd", job_id="evil")
    worker = SimpleWorker([lane], connection=queue.redis, serializer=JSONSerializer, job_class=queue.job_class)
    worker.work(burst=True)
    assert calls == ["doc-1"]
    assert lane.fetch_job(good).get_status() == "finished"
    failed = lane.fetch_job(evil.id)
    assert failed.get_status() == "failed" and "refused job function 'os.getcwd'" in failed.latest_result().exc_string
    stored = zlib.decompress(queue.redis.hget(f"rq:job:{good}", "data"))
    assert json.loads(stored)[0] == "tests.test_rq_jobs.project_job"  # JSON in Redis, not a pickle


def test_workers_take_the_tenants_lanes_in_turn(redis_url):
    """One tenant's backlog queued first does not hold back another tenant's documents."""
    queue = RQQueue(project_job, redis_url, "test-lanes", timeout_s=30, retries=0)
    for lane in queue.rq_queues:
        lane.empty()
    assert lane_number("acme") != lane_number("initech")  # two tenants of different lanes
    for n in range(4):
        queue.enqueue({"document_id": f"acme-{n}", "namespace": "acme"}, 0)
    for n in range(2):
        queue.enqueue({"document_id": f"initech-{n}", "namespace": "initech"}, 0)
    calls.clear()
    SimpleWorker(queue.rq_queues, connection=queue.redis, serializer=JSONSerializer,
                 job_class=queue.job_class).work(burst=True, dequeue_strategy=DequeueStrategy.ROUND_ROBIN)
    assert sorted(calls) == sorted([*(f"acme-{n}" for n in range(4)), "initech-0", "initech-1"])
    assert calls.index("initech-1") < calls.index("acme-3")  # in turn, not one tenant's all first
