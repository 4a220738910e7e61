"""Erasure: what a removed (or refused) document leaves behind is its id and what happened to it, never what it
said. Its record keeps only bookkeeping fields; the manifest of the version that learned it loses its probes,
routing key, neighbours and scores, and a per-document method's delta file (composing skips an erased document,
so no version reads it again); other versions and records lose the facts of it they replaced; and the idempotency
keys that named it are deleted (they hold a hash of its body). A whole-version method's delta (the memory's rows)
stays: later versions are composed from it.

An erasure is owed from its start (or from its owner's withdrawal) to its end, in the database
(DocumentStore.owe_erasure): one a crash cut short is finished at the next start (`finish_owed`), and a DELETE
repeated meanwhile erases again."""
from __future__ import annotations

import logging
from typing import Any

from core import faults
from core.documents import DocumentStore, UnknownDocument
from core.lifecycle import PENDING, Status
from core.versions import VersionStore

log = logging.getLogger(__name__)

# What a record keeps after erasure: bookkeeping, nothing derived from the text.
RECORD_KEPT = ("document_id", "status", "method", "weighting", "owner", "namespace", "created_at", "updated_at",
               "attempts", "job_id", "version", "timings", "removes", "withdrawn")
# What the learning version's manifest keeps: what composing and listing versions read, nothing from the text.
MANIFEST_KEPT = ("version", "parent", "documents", "method", "created_at", "delta_file", "delta_sha256",
                 "delta_bytes", "delta_object", "metrics", "gate", "routing", "namespace")


def scrubbed_record(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record[k] for k in RECORD_KEPT if k in record}


def scrubbed_manifest(manifest: dict[str, Any], removed_in: int | None) -> dict[str, Any]:
    """The manifest of the version that learned a removed document. `erased_in` tells composing to skip it (its
    key is gone, so nothing could reach its delta anyway)."""
    return {**{k: manifest[k] for k in MANIFEST_KEPT if k in manifest}, "probes": [], "erased_in": removed_in}


def without_replaced(entries: list[dict[str, Any]], document_id: str) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("document_id") != document_id]


def if_withdrawn(documents: DocumentStore, versions: VersionStore, record: dict[str, Any]) -> dict[str, Any]:
    """`record` as its worker left it final (refused, failed), erased and marked withdrawn where its owner asked to
    withdraw it while it trained (DocumentStore.ask_to_withdraw): the owner was answered 202 and is owed the
    erasure, however the attempt ended."""
    if record.get("withdrawing") and record["status"] in (Status.REJECTED, Status.FAILED):
        documents.update(record["document_id"], withdrawn=True)
        erase(documents, versions, record["document_id"], None)
    return record


def erase(documents: DocumentStore, versions: VersionStore, document_id: str, removed_in: int | None) -> None:
    """Erase `document_id` everywhere under the data folder; `removed_in` is the removal's version (None for a
    document that never became part of any version: rejected or failed). Every version folder is looked into,
    orphans too (a crash left them unserved, not empty); a manifest that cannot be read and names the document is
    emptied, and one that does not is left as it is: neither stops the erasure."""
    documents.owe_erasure(document_id, removed_in)  # first: from here a crash leaves it owed
    documents.replace(document_id, lambda record: {**scrubbed_record(record), "removed_in_version": removed_in,
                                                   "erased": True})
    faults.kill_point("erasing")
    documents.forget_idempotency(document_id)
    for record in documents.mentioning(document_id):
        if any(e.get("document_id") == document_id for e in record.get("replaces") or []):
            documents.update(record["document_id"], replaces=without_replaced(record["replaces"], document_id))
    for version, manifest in versions.readable(sorted({*versions.versions()[1:], *versions.orphans()})):
        if manifest is None:  # cut by a crash: nothing can be scrubbed field by field
            if versions.manifest_mentions(version, document_id):
                versions.empty_manifest(version)  # unreadable as before, without what it held
            continue
        if document_id in manifest["documents"] and not manifest.get("removes"):
            versions.rewrite_manifest(version, scrubbed_manifest(manifest, removed_in))
            if "routing" in manifest:  # a per-document delta: after the manifest that says it may be gone
                versions.drop_delta(version)
        elif any(e.get("document_id") == document_id for e in manifest.get("replaces", [])):
            versions.rewrite_manifest(version, {**manifest,
                                                "replaces": without_replaced(manifest["replaces"], document_id)})
    documents.truncate_log()  # the log's old pages hold every record rewritten above
    documents.erasure_finished(document_id)


def finish_owed(documents: DocumentStore, versions: VersionStore) -> list[str]:
    """Finish the erasures a crash cut short (at start, after `core/recovery.py: resumable` ended what a dead worker
    left): those of final documents. A pending one's withdrawal is its worker's to end, at its gate or its next
    claim. Returns the ids erased."""
    erased = []
    for document_id, removed_in in documents.erasures_owed():
        try:
            record = documents.get(document_id)
        except UnknownDocument:  # no record (one a POST took back): nothing to erase
            documents.erasure_finished(document_id)
            continue
        if record["status"] in PENDING or (record["status"] == Status.COMMITTED and removed_in is None):
            if record["status"] == Status.COMMITTED:
                log.warning("document %s is owed an erasure but served, and no removal names it", document_id)
            continue
        if record.get("withdrawing"):
            if_withdrawn(documents, versions, record)
        else:
            erase(documents, versions, document_id, removed_in)
        erased.append(document_id)
    return erased
