"""Where a deployment keeps what its processes share, opened from the settings.

By default everything is in the data folder (one machine, or machines that share it): version folders, the probe
suites' files, a file lock for the learner. With CKL_OBJECT_STORE_URL nothing is shared through a folder: versions
and the probe suites are in the database (CKL_DATABASE_URL: PostgreSQL for several machines), deltas in the object
store, and the learners' locks are the database's advisory locks; each process's data folder keeps only caches.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from core.database import connect
from core.fileio import write_bytes_atomic
from core.leases import LEARNER_LEASE, PROBES_LOCK, lease
from core.objects import CachedObjects, ObjectStore, S3Objects
from core.probes import ProbeSuites
from core.settings import Settings
from core.shared_values import FolderValues, TableValues
from core.version_folders import FolderVersionStore
from core.version_tables import DatabaseVersionStore
from core.versions import VersionStore


def shared_engine(settings: Settings) -> Engine | None:
    """The database that holds what the processes share (Settings requires its URL with an object store); None: the
    data folder holds it."""
    if settings.object_store_url is None or settings.database_url is None:
        return None
    return connect(settings.database_url)


def open_versions(settings: Settings, engine: Engine | None = None) -> VersionStore:
    """`engine`: shared_engine's, where the caller has made it (one pool per process, not one per store)."""
    if (engine := engine or shared_engine(settings)) is None or settings.object_store_url is None:
        return FolderVersionStore(settings.data_dir / "versions")
    objects = CachedObjects(S3Objects(settings.object_store_url), settings.data_dir / "cache" / "deltas",
                            settings.delta_cache_mb << 20)
    return DatabaseVersionStore(engine, objects)


def open_suites(settings: Settings, engine: Engine | None = None) -> ProbeSuites:
    if (engine := engine or shared_engine(settings)) is None:
        return ProbeSuites(FolderValues(settings.data_dir / "probes"))
    return ProbeSuites(TableValues(engine, lease(engine, PROBES_LOCK, settings.data_dir, ".probes.lock")))


@dataclass
class MethodFiles:
    """Files a method writes once and every process reads (the memory method's version-0 state), in `folder` of the
    process's data folder; with an object store, also objects there (`<folder name>-<file>`), fetched where missing."""
    folder: Path
    objects: ObjectStore | None = None

    def fetch(self, names: Iterable[str]) -> None:
        for name in names:
            if self.objects is not None and not (self.folder / name).exists() and \
                    (data := self.objects.get(f"{self.folder.name}-{name}")) is not None:
                write_bytes_atomic(self.folder / name, data)

    def publish(self, names: Iterable[str], missing_only: bool = False) -> None:
        for name in names:
            key = f"{self.folder.name}-{name}"
            if self.objects is not None and not (missing_only and self.objects.get(key) is not None):
                self.objects.put(key, (self.folder / name).read_bytes())


def method_files(settings: Settings, name: str) -> MethodFiles:
    return MethodFiles(settings.data_dir / name, S3Objects(settings.object_store_url) if settings.object_store_url
                       else None)


def method_lock(settings: Settings, name: str, key: int) -> AbstractContextManager:
    """Held while a method's files are made (one process makes them, the others then read them)."""
    return lease(shared_engine(settings), key, settings.data_dir / name, ".lock")


def learner_lease(settings: Settings, engine: Engine | None = None) -> AbstractContextManager:
    """Held by the one learner that may train at a time (workers/learner.py)."""
    return lease(engine or shared_engine(settings), LEARNER_LEASE, settings.data_dir, "learner.lock")


def document_lease(engine: Engine | None, settings: Settings, document_id: str) -> AbstractContextManager:
    """Held by the learner of one document (`engine`: shared_engine's): a second job of it (re-queued while the first
    runs) waits, then finds it final. On one machine a file lock of 256, chosen by the id's hash."""
    digest = int.from_bytes(hashlib.sha256(document_id.encode()).digest()[:8], "big") >> 1  # PostgreSQL's bigint
    return lease(engine, digest, settings.data_dir / "locks", f"{digest % 256}.lock")
