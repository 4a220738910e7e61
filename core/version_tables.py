"""The version store for processes that share no folder: versions, manifests, the pointer and its events in the
database (core/database.py's tables), deltas in an object store (core/objects.py), each commit's under a name of its
own: its SHA-256 and a random suffix, in its manifest.

A delta is uploaded first, then one transaction, under the database's writers lock, checks the parent, numbers the
version, writes its manifest, moves the pointer and logs the event: a commit refused deletes its object (no other
commit names it), a crash before the transaction commits leaves only an object no manifest names, never a version
that was not served, so this store has no orphans. Every change moves a counter
in the pointer's row, which tells each process when to read its cached list and manifests again.
"""
from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from sqlalchemy import Connection, Engine, func, insert, select, update

from core.database import lock_writers, version_events, version_pointer, versions
from core.objects import CachedObjects
from core.versions import MAX_VERSION, AlreadyCommitted, ParentMoved, UnknownVersion, VersionStore

POINTER = 1  # the pointer's row
EVENTS_SHOWN = 200
READ_AHEAD = 500


def delta_key(manifest: dict[str, Any]) -> str:
    """The name of a version's delta in the object store (a manifest without one names it by its hash alone)."""
    return manifest.get("delta_object") or f"{manifest['delta_sha256']}.safetensors"


class DatabaseVersionStore(VersionStore):
    def __init__(self, engine: Engine, objects: CachedObjects) -> None:
        super().__init__()
        self.engine, self.objects = engine, objects
        self._listed_rows: list[int] = []  # every version committed, as far as this process has looked

    def _pointer(self, connection: Connection | None = None) -> tuple[int, int, int]:
        """(current, changes, rewrites); all 0 before the first change."""
        query = select(version_pointer.c.current, version_pointer.c.changes, version_pointer.c.rewrites).where(
            version_pointer.c.id == POINTER)
        if connection is not None:
            row = connection.execute(query).first()
        else:
            with self.engine.connect() as own:
                row = own.execute(query).first()
        return tuple(row) if row else (0, 0, 0)

    def _changed(self, connection: Connection, current: int | None = None, rewrote: bool = False) -> None:
        """Move the pointer's counters (and the pointer, given `current`), in a writer's transaction."""
        was, changes, rewrites = self._pointer(connection)
        row = {"current": was if current is None else current, "changes": changes + 1,
               "rewrites": rewrites + rewrote}
        if connection.execute(update(version_pointer).where(version_pointer.c.id == POINTER).values(**row)).rowcount:
            return
        connection.execute(insert(version_pointer).values(id=POINTER, **row))

    def _change(self) -> int:
        return self._pointer()[1]

    def _rewrite_count(self) -> int:
        return self._pointer()[2]

    def _stored(self, version: int) -> str | None:
        with self.engine.connect() as connection:
            return connection.execute(select(versions.c.manifest).where(versions.c.version == version)).scalar()

    def _read_manifest(self, version: int) -> dict[str, Any] | None:
        """`version`'s manifest, and those of the READ_AHEAD versions on from it in the direction it is walked: down
        (a lineage is walked through parents that are mostly one less), or up where the one below is held (a loop
        over the versions). One query per READ_AHEAD versions, not per version."""
        cache = self._manifests  # the copies this read may add to (dropped whole if a rewrite comes meanwhile)
        low, high = (version, version + READ_AHEAD) if version - 1 in cache else (version - READ_AHEAD, version)
        with self.engine.connect() as connection:
            rows = connection.execute(select(versions.c.version, versions.c.manifest).where(
                versions.c.version.between(low, high))).all()
        stored = None
        for number, text in rows:
            if number == version:
                stored = text
            elif text and number not in cache:
                cache[number] = json.loads(text)
        if stored == "":
            raise ValueError("emptied by erasure")
        return None if stored is None else json.loads(stored)

    def _rewritten(self) -> None:
        """The local copies of the deltas an erasure deleted from the object store go too (another process erased)."""
        with self.engine.connect() as connection:
            erased = connection.execute(select(versions.c.manifest).where(
                versions.c.manifest.contains('"erased_in"'))).scalars().all()
        for manifest in map(json.loads, filter(None, erased)):
            if "routing" in manifest:  # a per-document delta, deleted with its document
                self.objects.forget(delta_key(manifest))

    def _listing(self) -> tuple[list[int], list[int]]:
        """Only the versions above the highest listed before are read: a commit numbers its version one past the
        highest under the writers lock, and none is ever deleted."""
        known = self._listed_rows  # replaced, never extended: threads listing at once each make a whole list
        with self.engine.connect() as connection:
            new = connection.execute(select(versions.c.version).where(
                versions.c.version > (known[-1] if known else 0)).order_by(versions.c.version)).scalars().all()
        self._listed_rows = known + list(new)
        return self._listed_rows, self._listed_rows

    def current(self) -> int:
        return self._pointer()[0]

    def exists(self, version: int) -> bool:
        return 0 <= version <= MAX_VERSION and (version == 0 or self._stored(version) is not None)

    def reconcile(self) -> list[int]:
        return []  # a version is written in the transaction that serves it

    def manifest_mentions(self, version: int, text: str) -> bool:
        return text in (self._stored(version) or "")

    def empty_manifest(self, version: int) -> None:
        self._rewrite(version, "")

    def rewrite_manifest(self, version: int, manifest: dict[str, Any]) -> None:
        self._rewrite(version, json.dumps(manifest))

    def _rewrite(self, version: int, stored: str) -> None:
        with self.engine.begin() as connection:
            lock_writers(connection, before_reading=True)
            changed = connection.execute(update(versions).where(versions.c.version == version).values(manifest=stored))
            if not changed.rowcount:
                raise UnknownVersion(f"version {version} does not exist")
            self._changed(connection, rewrote=True)

    def load_delta(self, version: int) -> dict[str, torch.Tensor]:
        manifest = self.manifest(version)
        key = delta_key(manifest)
        for _ in range(2):  # a local copy that does not match is dropped and fetched again, once
            data = self.objects.get(key)
            if data is None:
                if "erased_in" in manifest:
                    return {}
                raise ValueError(f"version {version}: its delta {key} is not in the object store")
            if hashlib.sha256(data).hexdigest() == manifest["delta_sha256"]:
                return load_tensors(data)
            self.objects.forget(key)
        raise ValueError(f"version {version}: delta does not match its manifest hash")

    def drop_delta(self, version: int) -> None:
        """Delete the delta, unless a version not erased names the same object (one the store was filled with
        outside commits may be shared)."""
        key = delta_key(self._manifest(version))
        with self.engine.connect() as connection:
            named = connection.execute(select(func.count()).where(
                versions.c.manifest.contains(key), ~versions.c.manifest.contains('"erased_in"'))).scalar()
        if not named:
            self.objects.delete(key)

    def commit(self, parent: int, delta: dict[str, torch.Tensor], manifest: dict[str, Any], delta_file: str) -> int:
        if (current := self.current()) != parent:  # refused before anything is uploaded
            raise ParentMoved(f"trained from version {parent}, but version {current} is now current")
        data = save_tensors({k: v.contiguous() for k, v in delta.items()})
        sha = hashlib.sha256(data).hexdigest()
        named = {"delta_file": delta_file, "delta_sha256": sha, "delta_bytes": len(data),
                 "delta_object": f"{sha}-{uuid.uuid4().hex[:12]}.safetensors"}  # this commit's own
        self.objects.put(named["delta_object"], data)  # before the version that names it
        try:
            return self._commit(parent, {**manifest, **named})
        except (ParentMoved, AlreadyCommitted):  # refused: no version names its object
            self.objects.delete(named["delta_object"])
            raise

    def _commit(self, parent: int, manifest: dict[str, Any]) -> int:
        with self.engine.begin() as connection:
            lock_writers(connection, before_reading=True)
            if (current := self._pointer(connection)[0]) != parent:
                raise ParentMoved(f"trained from version {parent}, but version {current} is now current")
            for document_id in manifest["documents"]:
                if (held := self.holding(document_id, parent)) is not None:
                    raise AlreadyCommitted(document_id, held)
            version = (connection.execute(select(func.max(versions.c.version))).scalar() or 0) + 1
            full = {**manifest, "version": version, "parent": parent, "created_at": time.time()}
            connection.execute(insert(versions).values(version=version, parent=parent, manifest=json.dumps(full)))
            self._move_pointer(connection, version, "commit")
            return version

    def activate(self, version: int, why: str = "activate") -> None:
        with self.engine.begin() as connection:
            lock_writers(connection, before_reading=True)
            if not self.exists(version):
                raise UnknownVersion(f"version {version} does not exist")
            self._move_pointer(connection, version, why)

    def _move_pointer(self, connection: Connection, version: int, why: str) -> None:
        previous = self._pointer(connection)[0]
        self._changed(connection, current=version)
        connection.execute(insert(version_events).values(version=version, from_version=previous, event=why,
                                                         at=time.time()))

    def events(self) -> list[dict[str, Any]]:
        with self.engine.connect() as connection:
            rows = connection.execute(select(version_events).order_by(version_events.c.seq.desc())
                                      .limit(EVENTS_SHOWN)).all()
        return [{"version": r.version, "from": r.from_version, "event": r.event, "at": r.at} for r in reversed(rows)]
