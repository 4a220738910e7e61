"""The document store: every accepted document is a JSON record on disk, written before it is queued.

Its status changes only through `move`, along the lifecycle in core/lifecycle.py. A record in a pending
status after a crash is picked up again by whichever worker starts next.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from core.fileio import read_json, write_json_atomic
from core.lifecycle import PENDING, Status, after_failed_attempt, transition


class IdempotencyConflict(Exception):
    """The idempotency key was used before with a different body."""


class UnknownDocument(Exception):
    pass


def body_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class DocumentStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._docs = root / "documents"
        self._keys = root / "idempotency"
        self._docs.mkdir(parents=True, exist_ok=True)
        self._keys.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file_lock = FileLock(str(root / ".documents.lock"))

    def create(self, body: dict[str, Any], idempotency_key: str | None) -> tuple[dict[str, Any], bool]:
        """Store a new document; with a known key, return the earlier one (and False for 'not new')."""
        digest = body_hash(body)
        with self._lock, self._file_lock:
            key_file = self._key_file(idempotency_key) if idempotency_key else None
            if key_file is not None and (known := read_json(key_file)) is not None:
                if known["body_sha256"] != digest:
                    raise IdempotencyConflict("idempotency_key was already used with a different document")
                return self.get(known["document_id"]), False
            now = time.time()
            record = {
                "document_id": uuid.uuid4().hex[:16],
                **body,
                "status": Status.QUEUED.value,
                "attempts": 0,
                "progress": {"step": 0, "steps": 0},
                "created_at": now,
                "updated_at": now,
                "job_id": None,
                "version": None,
                "gate": None,
                "scores": None,
                "error": None,
                "timings": {},
            }
            write_json_atomic(self._path(record["document_id"]), record)
            if key_file is not None:
                write_json_atomic(key_file, {"document_id": record["document_id"], "body_sha256": digest})
            return record, True

    def replace(self, document_id: str, rewrite: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Write `rewrite(record)` in the record's place, its status unchanged (erasure: fields dropped, not
        set)."""
        with self._lock, self._file_lock:
            record = rewrite(self.get(document_id))
            record.update(document_id=document_id, updated_at=time.time())
            write_json_atomic(self._path(document_id), record)
            return record

    def forget_idempotency(self, document_id: str) -> None:
        """Delete the idempotency keys that name the document (each holds a hash of its body)."""
        with self._lock, self._file_lock:
            for path in self._keys.glob("*.json"):
                if (read_json(path) or {}).get("document_id") == document_id:
                    path.unlink(missing_ok=True)

    def discard(self, document_id: str, idempotency_key: str | None) -> None:
        """Take back a record `create` just made (its job could not be queued): a refused request stores nothing."""
        with self._lock, self._file_lock:
            self._path(document_id).unlink(missing_ok=True)
            if idempotency_key:
                self._key_file(idempotency_key).unlink(missing_ok=True)

    def _key_file(self, idempotency_key: str) -> Path:
        return self._keys / (hashlib.sha256(idempotency_key.encode()).hexdigest() + ".json")

    def _path(self, document_id: str) -> Path:
        if not document_id.isalnum():
            raise UnknownDocument(document_id)
        return self._docs / f"{document_id}.json"

    def get(self, document_id: str) -> dict[str, Any]:
        record = read_json(self._path(document_id))
        if record is None:
            raise UnknownDocument(document_id)
        return record

    def update(self, document_id: str, **fields: Any) -> dict[str, Any]:
        """Write fields other than the status (that changes only through `move`)."""
        if "status" in fields:
            raise TypeError("DocumentStore.update does not write a status: use move() (core/lifecycle.py)")
        return self._write(document_id, fields)

    def move(self, document_id: str, status: Status, **fields: Any) -> dict[str, Any]:
        """Move the record to `status`, with `fields`, in one write; raises IllegalTransition (nothing written)
        when the lifecycle does not allow the move from the status the record has now."""
        return self._write(document_id, fields, status)

    def _write(self, document_id: str, fields: dict[str, Any], status: Status | None = None) -> dict[str, Any]:
        with self._lock, self._file_lock:
            record = self.get(document_id)
            if status is not None:  # checked under the lock, against the status on disk
                fields = {**fields, "status": transition(record["status"], status).value}
            record.update(fields, updated_at=time.time())
            write_json_atomic(self._path(document_id), record)
            return record

    def all(self) -> list[dict[str, Any]]:
        records = [read_json(p) for p in self._docs.glob("*.json")]
        return sorted((r for r in records if r), key=lambda r: r["created_at"])

    def pending(self) -> list[dict[str, Any]]:
        return [r for r in self.all() if r["status"] in PENDING]

    def unqueued(self, before: float) -> list[dict[str, Any]]:
        """Queued records made before `before` that no job names: the process that wrote one died before it
        queued the job (a write, then an enqueue, then the job id)."""
        return [r for r in self.pending()
                if r["status"] == Status.QUEUED and not r["job_id"] and r["created_at"] < before]

    def resumable(self, retries: int, holding: Callable[[str], int | None]) -> list[dict[str, Any]]:
        """The pending documents to run again after a worker died. One it died on during every allowed attempt
        is failed instead: a document that kills the process must not take it down at every start. One the
        current version already holds (`holding` names the version) died after its commit: it is committed."""
        again = []
        for record in self.pending():
            if after_failed_attempt(record["attempts"], retries) is not Status.FAILED:
                again.append(record)
            elif record["status"] != Status.QUEUED and (version := holding(record["document_id"])) is not None:
                self.move(record["document_id"], Status.COMMITTED, version=version, error=None)
            else:
                self.move(record["document_id"], Status.FAILED,
                          error=f"the worker stopped during all {record['attempts']} attempts")
        return again
