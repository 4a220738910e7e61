"""A DELETE at each moment of a worker's attempt at the document: while it trains (training stops at its next
step), at its gate (withdrawn before its commit), while its version is written (the DELETE waits for it, then asks
for the removal). Each moment is hit by sending the DELETE from inside the real learner's stage (a moment no request
from outside can be timed to hit); no worker takes the queue (a real Redis): the test runs the jobs."""
from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.lifecycle import Status
from tests.api_app import tiny_client, tiny_settings
from tests.test_erasure import SECRET, leftovers

BODY = {k: v for k, v in SECRET.items() if k != "idempotency_key"}  # what must leave no trace


@contextmanager
def posted(tmp_path: Path, redis_url: str) -> Iterator[tuple]:
    """A client of a server on the tiny model whose queue no worker takes, and the id of the document it was sent;
    once it is closed, nothing of the document is left in the data folder."""
    settings = tiny_settings(tmp_path, methods={"routed": {"learning_rate": 3e-2}}, redis_url=redis_url,
                             queue_name=f"moments-{uuid.uuid4().hex[:8]}")
    with tiny_client(settings) as client:
        yield client, client.post("/documents", json=SECRET).json()["document_id"]
    assert leftovers(tmp_path, BODY) == []


def assert_withdrawn(client, document_id: str) -> None:
    """Rejected, withdrawn and erased, and no version made."""
    record = client.get(f"/documents/{document_id}").json()
    assert (record["status"], record["withdrawn"], record["erased"]) == ("rejected", True, True)
    assert client.get("/versions").json()["current"] == 0
    assert client.learner.documents.erasures_owed(document_id) == []


def test_a_document_its_owner_deletes_during_its_gate_is_withdrawn_before_its_commit(tmp_path, redis_url):
    """The DELETE sent while the worker's gate runs (the gate's first step calls it): 202, and the gate's accepting
    verdict is not committed."""
    with posted(tmp_path, redis_url) as (client, accepted):
        documents, answers = client.learner.documents, []
        to_gate = documents.to_gate

        def deleted_at_the_gate(document_id: str):
            at_gate = to_gate(document_id)
            answers.append(client.delete(f"/documents/{document_id}"))
            return at_gate
        documents.to_gate = deleted_at_the_gate
        assert client.learner.learn(accepted) is Status.REJECTED
        assert answers[0].status_code == 202 and answers[0].json()["status"] == "evaluating", answers[0].text
        assert_withdrawn(client, accepted)
        assert client.get(f"/documents/{accepted}").json().get("gate") is None  # withdrawn before its commit


def test_a_document_its_owner_deletes_while_it_trains_stops_training_at_the_next_step(tmp_path, redis_url):
    """The DELETE sent after the first training step, before its progress is written: 202, and no training step
    after it."""
    with posted(tmp_path, redis_url) as (client, accepted):
        documents, answers, steps_after = client.learner.documents, [], []
        update = documents.update

        def deleted_after_the_first_step(document_id: str, **fields):
            step = (fields.get("progress") or {}).get("step", 0)
            if answers and step:
                steps_after.append(step)
            elif step == 1:
                answers.append(client.delete(f"/documents/{document_id}"))
            return update(document_id, **fields)
        documents.update = deleted_after_the_first_step
        assert client.learner.learn(accepted) is Status.REJECTED
        assert answers[0].status_code == 202 and answers[0].json()["withdrawing"], answers[0].text
        assert steps_after == []
        assert_withdrawn(client, accepted)


def test_a_document_its_owner_deletes_while_its_version_is_written_is_removed_once_committed(tmp_path, redis_url):
    """The DELETE sent the moment the gate's accepting verdict is marked (`to_commit` calls it, on a thread of its
    own) waits for the version being written, then queues the removal (202); the removal, run, erases the
    document."""
    with posted(tmp_path, redis_url) as (client, accepted):
        documents, answers, senders = client.learner.documents, [], []
        to_commit = documents.to_commit

        def deleted_while_committing(document_id: str):
            marked = to_commit(document_id)
            senders.append(threading.Thread(target=lambda: answers.append(
                client.delete(f"/documents/{document_id}"))))
            senders[-1].start()
            return marked
        documents.to_commit = deleted_while_committing
        assert client.learner.learn(accepted) is Status.COMMITTED
        senders[0].join(30)
        assert answers[0].status_code == 202, answers[0].text
        removal = answers[0].json()["document_id"]
        assert removal != accepted and client.learner.learn(removal) is Status.COMMITTED
        assert client.get(f"/documents/{accepted}").json()["erased"] is True
