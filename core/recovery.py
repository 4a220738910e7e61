"""What a start picks up again from the document store after a crash: the documents a dead worker left pending,
and those a dead API process stored without queueing their job."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.documents import DocumentStore
from core.lifecycle import Status, after_failed_attempt


def unqueued(documents: DocumentStore, before: float) -> list[dict[str, Any]]:
    """Queued records made before `before` that no job names: the process that wrote one died before it queued
    the job (a write, then an enqueue, then the job id)."""
    return [r for r in documents.pending()
            if r["status"] == Status.QUEUED and not r["job_id"] and r["created_at"] < before]


def resumable(documents: DocumentStore, retries: int, holding: Callable[[str], int | None],
              erase: Callable[[str, int | None], None]) -> list[dict[str, Any]]:
    """The pending documents to run again after a worker died. One it died on during every allowed attempt is
    failed instead: a document that kills the process must not take it down at every start. One the current
    version already holds (`holding` names the version) died after its commit: it is committed, and a removal's
    target erased (`erase(target, version)`: the death may have come before its erasure)."""
    again = []
    for record in documents.pending():
        if after_failed_attempt(record["attempts"], retries) is not Status.FAILED:
            again.append(record)
        elif record["status"] != Status.QUEUED and (version := holding(record["document_id"])) is not None:
            if record.get("removes"):
                erase(record["removes"], version)
            documents.move(record["document_id"], Status.COMMITTED, version=version, error=None)
        else:
            # One its owner asked to withdraw meanwhile is owed its erasure: core/erasure.py: finish_owed, next.
            documents.move(record["document_id"], Status.FAILED,
                           error=f"the worker stopped during all {record['attempts']} attempts")
    return again
