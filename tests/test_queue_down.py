"""The job queue down (RQ pointed at a port where no Redis listens, a real refusal): POST and DELETE /documents
answer 503 and store nothing (no record, no idempotency key), a retry with the same key is not answered 202 for a
job that does not exist, and a removal that could not be queued leaves its target as it was (one in its commit too)."""
from __future__ import annotations

import socket
import time
import uuid

import pytest

from tests.api_app import tiny_client, tiny_settings
from tests.database import rows
from tests.test_learner import FACT, submit
from tests.tiny import tiny_loaded
from workers.learner import Learner


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_documents_are_refused_with_503_while_the_queue_is_down(tmp_path):
    fast = {"routed": {"learning_rate": 3e-2}}
    learner = Learner(tiny_settings(tmp_path, methods=fast), loaded=tiny_loaded())
    taught = submit(learner, {**FACT, "method": "routed"})  # a removable method's document
    assert learner.learn(taught) == "committed"
    settings = tiny_settings(tmp_path, methods=fast, redis_url=f"redis://127.0.0.1:{unused_port()}/0")
    with tiny_client(settings) as client:
        body = {**FACT, "text": FACT["text"] + " again", "idempotency_key": "k1"}
        first = client.post("/documents", json=body)
        assert first.status_code == 503 and first.json()["error"]["code"] == "queue_unavailable"
        assert [r["document_id"] for r in client.get("/documents").json()["items"]] == [taught]
        assert rows(tmp_path, "SELECT count(*) FROM idempotency") == [(0,)]
        assert client.post("/documents", json=body).status_code == 503  # still down: still no 202
        removal = client.delete(f"/documents/{taught}")
        assert removal.status_code == 503 and removal.json()["error"]["code"] == "queue_unavailable"
        again = client.delete(f"/documents/{taught}")
        assert again.status_code == 503, again.json()
        target = client.get(f"/documents/{taught}").json()
        assert target["status"] == "committed" and not target.get("removed_in_version")
        assert client.get("/versions").json()["current"] == 1


def test_a_removal_that_cannot_be_queued_leaves_a_document_in_its_commit_as_it_was(tmp_path):
    """A document whose version holds it while its record is behind (the state a worker's death inside its commit
    leaves, written here by hand): its owner's DELETE, answered 503, marks nothing and owes no erasure."""
    from core.documents import DocumentStore
    from core.lifecycle import Status

    fast = {"routed": {"learning_rate": 3e-2}}
    learner = Learner(tiny_settings(tmp_path, methods=fast), loaded=tiny_loaded())
    taught = submit(learner, {**FACT, "method": "routed"})
    assert learner.learn(taught) == "committed"
    documents = DocumentStore(tmp_path)
    behind, _ = documents.create({**FACT, "text": FACT["text"] + " too", "method": "routed", "owner": None}, None)
    documents.move(behind["document_id"], Status.TRAINING, attempts=1)
    documents.move(behind["document_id"], Status.EVALUATING, committing=True)
    versions = learner.versions
    versions.rewrite_manifest(1, {**versions.manifest(1), "documents": [taught, behind["document_id"]]})
    settings = tiny_settings(tmp_path, methods=fast, redis_url=f"redis://127.0.0.1:{unused_port()}/0")
    with tiny_client(settings) as client:
        removal = client.delete(f"/documents/{behind['document_id']}")
        assert removal.status_code == 503 and removal.json()["error"]["code"] == "queue_unavailable", removal.json()
    record = documents.get(behind["document_id"])
    assert record["status"] == "evaluating" and not record.get("withdrawing"), record
    assert documents.erasures_owed(behind["document_id"]) == []


@pytest.mark.redis
def test_a_record_written_but_never_queued_gets_its_job_when_the_api_starts(tmp_path, redis_url):
    """The state a crash between the write and the enqueue leaves: a queued record without a job. The API queues it
    on start (a real Redis; no worker runs, so the job waits there)."""
    from core.documents import DocumentStore
    from serving.runtime import UNQUEUED_AFTER_S, Runtime
    from workers.job import learn_document

    documents = DocumentStore(tmp_path)
    orphan, _ = documents.create({**FACT, "method": "routed", "owner": None}, None)
    fresh, _ = documents.create({**FACT, "text": "another", "method": "routed", "owner": None}, None)
    documents.update(orphan["document_id"], created_at=time.time() - UNQUEUED_AFTER_S - 1)
    settings = tiny_settings(tmp_path, redis_url=redis_url, queue_name=f"orphans-{uuid.uuid4().hex[:8]}")
    runtime = Runtime.create(settings, run_job=learn_document, load=tiny_loaded)
    runtime.start()
    try:
        assert runtime.error is None, runtime.error
        deadline = time.monotonic() + 10
        while not runtime.documents.get(orphan["document_id"])["job_id"]:
            assert time.monotonic() < deadline, "the orphan was never queued"
            time.sleep(0.05)
        job_id = runtime.documents.get(orphan["document_id"])["job_id"]
        assert job_id in runtime.queue.job_ids()
        assert runtime.documents.get(fresh["document_id"])["job_id"] is None  # being queued by a live request
    finally:
        runtime.close()
