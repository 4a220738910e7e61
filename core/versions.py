"""The version store: every committed update is a numbered version (a delta and its manifest), and one pointer says
which is served. Two stores keep them: folders in the data folder (core/version_folders.py, the default), or
tables in the database with the deltas in an object store (core/version_tables.py: processes on several machines
that share no folder). core/storage.py opens the one the settings name.

A commit names the parent it was trained from: a commit whose parent is no longer current is refused. What this
module holds is what both stores do alike: each process keeps the manifests it has read and what was computed from
them, until the store says it changed.
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, TypeVar

import torch

T = TypeVar("T")
MAX_VERSION = 2**31 - 1  # a number past it names no version (and no file name too long to open)
KEEPING = threading.Lock()  # request threads and the embedded learner keep values at once
LASTING = 16  # values `keep` holds: a few lists per version asked for, and a version or two before


class ParentMoved(Exception):
    """The current version changed while a candidate was being trained from the old one."""


class AlreadyCommitted(Exception):
    """A document is committed once: a retried job (a worker killed after the commit, before its record said
    so; two workers on one document) finds it already in the lineage."""

    def __init__(self, document_id: str, version: int) -> None:
        super().__init__(f"document {document_id} is already committed in version {version}")
        self.version = version


class UnknownVersion(Exception):
    pass


class VersionStore(ABC):
    def __init__(self) -> None:
        self._removes: dict[int, str | None] = {}  # version -> the document it removes (removed())
        self._stamp: Hashable | None = None  # the store's change stamp when the caches below were checked
        self._rewrites: int | None = None
        self._listed: dict[bool, list[int]] = {}  # orphans included or not -> the committed versions
        self._manifests: dict[int, dict[str, Any]] = {}
        self._memos: dict[Hashable, Any] = {}
        self._lasting: dict[Hashable, Any] = {}  # what holds while no manifest is rewritten (`kept`)

    # What each store reads and writes its own way.
    @abstractmethod
    def _change(self) -> Hashable:
        """A stamp that differs after any change to the store (a commit, a pointer move, a rewrite)."""

    @abstractmethod
    def _rewrite_count(self) -> int:
        """How many manifests were ever rewritten (erasure)."""

    @abstractmethod
    def _read_manifest(self, version: int) -> dict[str, Any] | None:
        """A committed version's manifest as stored; None when there is none; ValueError when it cannot be read."""

    @abstractmethod
    def _listing(self) -> tuple[list[int], list[int]]:
        """The committed versions past 0, sorted: all of them, and those that are not orphans."""

    @abstractmethod
    def current(self) -> int: ...

    @abstractmethod
    def exists(self, version: int) -> bool: ...

    @abstractmethod
    def reconcile(self) -> list[int]:
        """Flag the versions a crash left written but never served; returns the new orphans."""

    @abstractmethod
    def manifest_mentions(self, version: int, text: str) -> bool:
        """Whether a version's stored manifest holds `text` (one that cannot be parsed too)."""

    @abstractmethod
    def empty_manifest(self, version: int) -> None:
        """Empty a manifest that cannot be read (erasure: it may hold what it cannot be scrubbed of)."""

    @abstractmethod
    def rewrite_manifest(self, version: int, manifest: dict[str, Any]) -> None:
        """Replace a committed version's manifest (erasure scrubs what a removed document left in it)."""

    @abstractmethod
    def load_delta(self, version: int) -> dict[str, torch.Tensor]:
        """A version's delta, checked against its hash; nothing for an erased document's deleted one (a server still
        serving a version from before its removal reads it so: the document adds nothing)."""

    @abstractmethod
    def drop_delta(self, version: int) -> None:
        """Delete a version's delta (erasure: a per-document delta no composition reads any more)."""

    @abstractmethod
    def commit(self, parent: int, delta: dict[str, torch.Tensor], manifest: dict[str, Any], delta_file: str) -> int:
        """A new version from `parent`, made current: ParentMoved if `parent` is no longer current, AlreadyCommitted
        if one of its documents is in the parent's lineage."""

    @abstractmethod
    def activate(self, version: int, why: str = "activate") -> None: ...

    @abstractmethod
    def events(self) -> list[dict[str, Any]]:
        """The latest pointer moves, oldest first."""

    # What both read alike.
    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`, a function of this store's contents, computed again only after the store changed."""
        self._check()
        if key not in self._memos:
            self._memos[key] = compute()
        return self._memos[key]

    def kept(self, key: Hashable) -> Any | None:
        """What `keep` stored under `key`, while no manifest was rewritten since (None: nothing). For what a
        committed version's lineage gives: a new version leaves it as it was; an erasure's rewrite may not."""
        self._check()
        return self._lasting.get(key)

    def keep(self, key: Hashable, value: Any, rewrites: int | None, instead_of: Hashable | None = None) -> None:
        """Store `value`, computed when `rewrites()` was `rewrites` (not if a manifest was rewritten since: it may
        hold what an erasure took out), in place of what `instead_of` held; at most LASTING values."""
        with KEEPING:
            if rewrites != self._rewrites:
                return
            self._lasting.pop(instead_of, None)
            self._lasting[key] = value
            while len(self._lasting) > LASTING:
                del self._lasting[next(iter(self._lasting))]  # the oldest stored

    def rewrites(self) -> int | None:
        """How many manifests were ever rewritten (an erasure scrubs a removed document's): what was read of a
        manifest holds while this stays the same."""
        self._check()
        return self._rewrites

    def _check(self) -> None:
        """Drop the version list when the store changed since it was read, and the manifests when one of them was
        rewritten (by this process or another)."""
        stamp = self._change()  # read before the caches are refilled: a change after it is seen
        if stamp == self._stamp:
            return
        self._stamp, self._listed, self._memos = stamp, {}, {}
        if (rewrites := self._rewrite_count()) != self._rewrites:
            self._rewrites, self._manifests, self._lasting = rewrites, {}, {}
            self._rewritten()

    def _rewritten(self) -> None:
        """What a store does once it sees that a manifest was rewritten (by an erasure), or at its first look."""

    def manifest(self, version: int) -> dict[str, Any]:
        self._check()
        return self._manifest(version)

    def _manifest(self, version: int) -> dict[str, Any]:
        """A manifest, from this process's copy if it has one (`_check` says whether those are current)."""
        if not 0 <= version <= MAX_VERSION:
            raise UnknownVersion(f"version {version} does not exist")
        if version == 0:
            return {"version": 0, "parent": None, "documents": [], "probes": [], "method": "base", "metrics": {}}
        cache = self._manifests  # read before the manifest: a rewrite meanwhile drops this dict, and this copy with it
        if (known := cache.get(version)) is not None:
            return known  # shared: callers copy before they change one (erasure does)
        try:
            data = self._read_manifest(version)
        except ValueError as exc:  # emptied or cut by a crash
            raise UnknownVersion(f"version {version}'s manifest cannot be read: {exc}") from exc
        if data is None:
            raise UnknownVersion(f"version {version} does not exist")
        cache[version] = data
        return data

    def readable(self, numbers: Iterable[int]) -> Iterator[tuple[int, dict[str, Any] | None]]:
        """Each version's manifest, None where it cannot be read: the store checked once for the whole loop, not
        once per manifest (a query each, for the database's)."""
        self._check()
        for version in numbers:
            try:
                yield version, self._manifest(version)
            except UnknownVersion:
                yield version, None

    def versions(self) -> list[int]:
        return [0, *self._committed(orphans=False)]

    def orphans(self) -> list[int]:
        return sorted(set(self._committed()) - set(self._committed(orphans=False)))

    def _committed(self, orphans: bool = True) -> list[int]:
        """Committed versions past 0, orphans included unless asked otherwise."""
        self._check()
        if not self._listed:
            every, served = self._listing()
            self._listed = {True: every, False: served}
        return list(self._listed[orphans])

    def removed(self) -> set[str]:
        """Every document a removal version took out. A manifest's `removes` never changes once written, so each
        version's is read once per store."""
        unread = [v for v in self._committed(orphans=False) if v not in self._removes]
        for version, manifest in self.readable(unread):
            if manifest is not None:  # else emptied by a crash: it removes nothing that can be read
                self._removes[version] = manifest.get("removes")
        return {d for d in self._removes.values() if d}

    def lineage(self, version: int) -> list[dict[str, Any]]:
        """Manifests from version 1 up to `version` along parent links (the knowledge it contains)."""
        return list(self.ancestry(version))[::-1]

    def ancestry(self, version: int) -> Iterator[dict[str, Any]]:
        """Manifests from `version` down to version 1 along parent links, the store checked once."""
        self._check()
        while version:
            manifest = self._manifest(version)
            yield manifest
            version = manifest["parent"]

    def holding(self, document_id: str, version: int) -> int | None:
        """The version along `version`'s lineage that committed `document_id`, if any."""
        return next((m["version"] for m in self.lineage(version) if document_id in m["documents"]), None)
