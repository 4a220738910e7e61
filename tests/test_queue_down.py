"""The job queue down (RQ pointed at a port where no Redis listens, a real refusal): POST and DELETE /documents
answer 503 and store nothing (no record, no idempotency key), a retry with the same key is not answered 202 for a
job that does not exist, and a removal that could not be queued leaves its target as it was."""
from __future__ import annotations

import socket

from tests.api_app import tiny_client, tiny_settings
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
        assert list((tmp_path / "idempotency").iterdir()) == []
        assert client.post("/documents", json=body).status_code == 503  # still down: still no 202
        removal = client.delete(f"/documents/{taught}")
        assert removal.status_code == 503 and removal.json()["error"]["code"] == "queue_unavailable"
        again = client.delete(f"/documents/{taught}")
        assert again.status_code == 503, again.json()
        target = client.get(f"/documents/{taught}").json()
        assert target["status"] == "committed" and not target.get("removed_in_version")
        assert client.get("/versions").json()["current"] == 1
