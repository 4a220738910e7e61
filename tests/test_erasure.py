"""Erasure on the tiny model: after a removal nothing under the data folder holds the document's text, its key
words, its probes or a hash of its body; no version that held it is served or listed without an admin's force,
whichever version is current; a document no version holds (rejected, failed) can be erased too."""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from core.documents import DocumentStore, body_hash
from core.lifecycle import Status
from tests.api_app import tiny_client, tiny_settings, wait_final

SECRET = {"text": "the capital of veltoria is marnhold", "method": "routed", "idempotency_key": "secret-1",
          "probes": [{"prompt": "the capital of veltoria is", "answer": "marnhold"}]}
TRACES = ("veltoria", "marnhold")


def leftovers(folder: Path, body: dict) -> list[str]:
    """Files under `folder` that hold a trace of the document: its rare words, or a hash of its body."""
    digests = {body_hash(body), hashlib.sha256(body["text"].encode()).hexdigest()}
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix != ".safetensors":  # weights hold no text
            content = path.read_bytes().decode("utf-8", "replace").lower()
            found += [f"{path.relative_to(folder)}: {t}" for t in (*TRACES, *digests) if t in content]
    return found


def test_a_removed_document_leaves_no_trace_and_no_version_brings_it_back(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    settings = tiny_settings(tmp_path, methods={"routed": {"learning_rate": 3e-2}})
    with tiny_client(settings) as client:
        accepted = client.post("/documents", json=SECRET).json()
        record = wait_final(client, accepted["document_id"])
        assert record["status"] == "committed" and record["version"] == 1, record
        stored = client.learner.documents.get(record["document_id"])
        body = {k: v for k, v in stored.items() if k in {"text", "probes", "weighting", "method", "owner", "supersedes",
                                                          "hint"}}
        removal = client.delete(f"/documents/{record['document_id']}")
        assert wait_final(client, removal.json()["document_id"])["status"] == "committed"
        assert leftovers(tmp_path, {**body, **{k: v for k, v in stored.items() if k not in body and k in SECRET}}) == []
        assert not any(t in m.lower() for m in caplog.messages for t in TRACES)
        # A rollback to before the removal does not undo it: version 1 still needs force, by name or activation.
        assert client.post("/versions/0/activate", json={}).json() == {"current": 0}
        again = client.post("/versions/1/activate", json={})
        assert again.status_code == 409 and again.json()["error"]["code"] == "would_restore_removed"
        models = [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert "ckl-v1" not in models and "ckl-v2" in models
        asked = client.post("/v1/completions", json={"model": "ckl-v1", "prompt": "the capital of veltoria is"})
        assert asked.status_code == 404
        # The same idempotency key is free again: its file (a hash of the body) is gone.
        assert client.post("/documents", json=SECRET).json()["document_id"] != record["document_id"]


def test_a_document_no_version_holds_is_erased_at_once(tmp_path):
    settings = tiny_settings(tmp_path)
    documents = DocumentStore(tmp_path)
    body = {k: v for k, v in SECRET.items() if k != "idempotency_key"}
    record, _ = documents.create(body, json.dumps(["user", None, "secret-1"]))
    documents.move(record["document_id"], Status.FAILED, error="the job queue was down")
    with tiny_client(settings) as client:
        erased = client.delete(f"/documents/{record['document_id']}")
        assert erased.status_code == 200 and erased.json()["erased"] is True
        assert client.get(f"/documents/{record['document_id']}").json()["status"] == "failed"
    assert leftovers(tmp_path, body) == []
