"""`ckl fsck [--data-dir DIR]`: a data folder checked for consistency, reading only. The version pointer names a
committed version; each committed version's manifest reads, its parent is committed, and its delta is there with
the hash its manifest gives (an erased document's may be gone: erasure deletes a routed document's); each document
a version holds has a record, and each committed record's version holds it; each erased document left no probe,
key or replaced fact in any manifest (orphans too) or record, and no idempotency key. Each finding says what a
repair would do; orphans (folders a crash left before the pointer moved, never served) are listed apart: they are
what a crash is allowed to leave. Exit status 1 when anything else is found."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.documents import DocumentStore
from core.lifecycle import PENDING, Status
from core.version_folders import FolderVersionStore, sha256_file
from core.versions import UnknownVersion

ORPHAN = "orphan"  # what a crash may leave: not a fault


@dataclass(frozen=True)
class Finding:
    kind: str
    where: str
    repair: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.where} (repair: {self.repair})"


def records(documents: DocumentStore, page: int = 500) -> Iterator[dict[str, Any]]:
    offset = 0
    while batch := documents.page(None, offset, page)[1]:
        yield from batch
        offset += len(batch)


def version_findings(versions: FolderVersionStore, manifests: dict[int, dict[str, Any]]) -> Iterator[Finding]:
    """The pointer, and each committed version's manifest, parent and delta."""
    committed = set(versions.versions())
    try:
        current: int | str = versions.current()
    except ValueError:  # emptied by a crash
        current = "nothing readable"
    if current not in committed:
        yield Finding("pointer", f"CURRENT names {current}, not a committed version",
                      "point it at the newest committed version (the server's start-up fallback does)")
    for version in sorted(committed - {0}):
        try:
            manifest = manifests[version] = versions.manifest(version)
        except UnknownVersion:
            yield Finding("unreadable_manifest", f"version {version}",
                          "serve its parent (the start-up fallback does) and remove the folder")
            continue
        if (manifest["parent"] or 0) not in committed:
            yield Finding("parent_missing", f"version {version}: parent {manifest['parent']}",
                          "activate another version; this one cannot be composed")
        delta = versions.root / str(version) / manifest["delta_file"]
        erased = "erased_in" in manifest
        if not delta.exists():
            if not erased:
                yield Finding("delta_missing", f"version {version}: {manifest['delta_file']}",
                              "restore the folder from a backup, or serve a version before it")
        elif erased and "routing" in manifest:  # a crash between the manifest's scrub and the file's deletion
            yield Finding("erasure_incomplete", f"version {version}: an erased document's delta file",
                          "erase again (DELETE the document): the file is deleted")
        elif sha256_file(delta) != manifest["delta_sha256"]:
            yield Finding("delta_mismatch", f"version {version}: {manifest['delta_file']}",
                          "restore the folder from a backup, or serve a version before it")
    for version in versions.orphans():
        yield Finding(ORPHAN, f"version {version}", "none needed: never served; the folder may be removed")


def erased_findings(versions: FolderVersionStore, documents: DocumentStore, record: dict[str, Any],
                    everywhere: list[int]) -> Iterator[Finding]:
    """Where an erased document is still mentioned by more than its id."""
    document_id = record["document_id"]
    for version in everywhere:
        try:
            manifest = versions.manifest(version)
        except UnknownVersion:
            if versions.manifest_mentions(version, document_id):
                yield Finding("erasure_incomplete", f"{document_id}: the unreadable manifest of version {version}",
                              "erase again (DELETE the document): the manifest is emptied")
            continue
        if document_id in manifest["documents"] and not manifest.get("removes") and (
                manifest.get("probes") or "key" in manifest):
            yield Finding("erasure_incomplete", f"{document_id}: its probes or key in version {version}",
                          "erase again (DELETE the document): the manifest is scrubbed")
        if any(e.get("document_id") == document_id for e in manifest.get("replaces", [])):
            yield Finding("erasure_incomplete", f"{document_id}: facts it replaced, in version {version}",
                          "erase again (DELETE the document)")
    if set(record) & {"text", "probes"} or documents.idempotency_count(document_id):
        yield Finding("erasure_incomplete", f"{document_id}: its record's text or an idempotency key",
                      "erase again (DELETE the document)")


def check(data_dir: Path, database_url: str | None = None) -> list[Finding]:
    """Every finding in the data folder (and its database: `database_url`, else the folder's SQLite)."""
    versions = FolderVersionStore(data_dir / "versions")
    documents = DocumentStore(data_dir, database_url)
    manifests: dict[int, dict[str, Any]] = {}
    found = list(version_findings(versions, manifests))
    held = {d: v for v, m in manifests.items() if not m.get("removes") for d in m["documents"]}
    everywhere = sorted({*manifests, *versions.orphans()})
    known = set()
    for record in records(documents):
        known.add(document_id := record["document_id"])
        if record.get("erased"):
            found += erased_findings(versions, documents, record, everywhere)
        elif record["status"] == Status.COMMITTED and record.get("version") not in (None, *manifests) \
                and not record.get("removes"):
            found.append(Finding("record_version_missing", f"{document_id}: version {record['version']}",
                                 "teach the document again, or restore the version"))
    for document_id, _ in documents.erasures_owed():  # a crash cut it short: finished at the next start
        if document_id in known and documents.get(document_id)["status"] not in PENDING:
            found.append(Finding("erasure_owed", document_id,
                                 "start the server or a worker (each finishes it), or DELETE the document again"))
    for document_id, version in sorted(held.items()):
        if document_id not in known:
            found.append(Finding("record_missing", f"{document_id}, held by version {version}",
                                 "restore the database from a backup, or remove the document's version"))
    return found


def main(argv: list[str]) -> None:
    from core.settings import Settings

    parser = argparse.ArgumentParser(prog="ckl fsck", description=__doc__)
    parser.add_argument("--data-dir", type=Path, help="data folder (default ./data or CKL_DATA_DIR)")
    args = parser.parse_args(argv)
    settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    if settings.object_store_url:
        sys.exit("ckl fsck checks a data folder's versions; with CKL_OBJECT_STORE_URL they are in the database")
    if not (settings.data_dir / "versions").is_dir():  # checking would create a data folder where there is none
        sys.exit(f"ckl fsck: {settings.data_dir} holds no data folder (no versions/)")
    findings = check(settings.data_dir, settings.database_url)
    for finding in findings:
        print(finding)
    faults = [f for f in findings if f.kind != ORPHAN]
    print(f"{len(faults)} finding(s), {len(findings) - len(faults)} orphan(s)")
    sys.exit(1 if faults else 0)
