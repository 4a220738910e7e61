"""The version store in the data folder (the default): each committed update is a folder `versions/N/` and one
pointer says which is served.

A commit writes the delta and its manifest into a temporary folder, renames it to `N/`, and only then
moves the `CURRENT` pointer (an atomic file replace). A crash at any point leaves the old pointer, so
the last committed version is what a restarted server serves. Commits run under a cross-process lock
and name the parent they were trained from: a commit whose parent is no longer current is refused.

A crash between the rename and the pointer move leaves a folder that was never served: an orphan. Every
version the pointer ever named is listed in `served.json` (after the pointer moved), and before each pointer
move and at every start (`reconcile`, under the lock) a folder neither listed nor current is flagged with an
`ORPHAN` file: never listed, never activatable, its number never reused, kept for an operator to inspect.

Each process keeps the folder list and the manifests it has read: every change to the store replaces a file in
the root folder (a folder renamed into place, the pointer, the served list, `REWRITTEN` when erasure rewrote a
manifest), so the root folder's modification time says when to read them again.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock
from safetensors.torch import load_file, save_file

from core import faults
from core.fileio import fsync_dir, fsync_file, read_json, write_bytes_atomic, write_json_atomic
from core.versions import MAX_VERSION, AlreadyCommitted, ParentMoved, UnknownVersion, VersionStore

MANIFEST_FILE = "manifest.json"
ORPHAN_FILE = "ORPHAN"
REWRITTEN_FILE = "REWRITTEN"  # how many manifests were ever rewritten: a reader's copies are old when it changes


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def new_folders(root: Path, seen: set[int], gaps: set[int]) -> tuple[set[int], set[int]]:
    """The version folders (a manifest inside) not in `seen`, and the numbers below the highest that have none yet.
    A commit numbers its folder one past the highest (renamed into place with its manifest): after the first look,
    only the numbers above the highest seen are looked at, and the `gaps` the first look left (a folder renamed into
    place while it read the names may be missed by it); not a read of every folder's name after each commit."""
    def committed(version: int | str) -> bool:
        return os.path.exists(os.path.join(root, str(version), MANIFEST_FILE))
    if not seen:
        found = {int(entry.name) for entry in os.scandir(root) if entry.name.isdigit() and committed(entry.name)}
        return found, set(range(1, max(found, default=0))) - found
    found, version = {v for v in gaps if committed(v)}, max(seen) + 1
    while committed(version):
        found.add(version)
        version += 1
    return found, gaps - found


class FolderVersionStore(VersionStore):
    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._pointer = root / "CURRENT"
        self._events = root / "events.json"
        self._served = root / "served.json"
        self.lock = FileLock(str(root / ".lock"))
        self._committed_seen: set[int] = set()  # every folder with a manifest seen so far, and those flagged orphans
        self._flagged: set[int] = set()
        self._gaps: set[int] = set()  # the numbers below the highest with no folder (new_folders)

    def _change(self) -> int:
        return self.root.stat().st_mtime_ns  # every change replaces a file in the root folder

    def _rewrite_count(self) -> int:
        return read_json(self.root / REWRITTEN_FILE, 0)

    def current(self) -> int:
        try:
            return int(self._pointer.read_text().strip())
        except FileNotFoundError:
            return 0

    def _pointed(self) -> int | None:
        """The pointer; None when it cannot be read (emptied by a crash: the start-up fallback replaces it)."""
        try:
            return self.current()
        except ValueError:
            return None

    def exists(self, version: int) -> bool:
        if not 0 <= version <= MAX_VERSION:
            return False
        folder = self.root / str(version)
        return version == 0 or ((folder / MANIFEST_FILE).exists() and not (folder / ORPHAN_FILE).exists())

    def _read_manifest(self, version: int) -> dict[str, Any] | None:
        return read_json(self.root / str(version) / MANIFEST_FILE)

    def _listing(self) -> tuple[list[int], list[int]]:
        self._list()
        return sorted(self._committed_seen), sorted(self._committed_seen - self._flagged)

    def _list(self) -> None:
        """Add the folders committed since the last look (`new_folders`); of those not in the served list, flag the
        orphans (only a folder never served can be flagged one later)."""
        found, self._gaps = new_folders(self.root, self._committed_seen, self._gaps)
        self._committed_seen |= found
        served = set(read_json(self._served, None) or ())
        for version in self._committed_seen - self._flagged - served:
            if (self.root / str(version) / ORPHAN_FILE).exists():
                self._flagged.add(version)

    def reconcile(self) -> list[int]:
        """Flag the folders a crash left between their rename and the pointer move; returns the new orphans.
        Runs under the lock, so no commit is half done meanwhile."""
        with self.lock:
            listed = read_json(self._served)
            # A store from before the list: every folder it has was committed whole.
            served = set(self._committed() if listed is None else listed)
            if current := self._pointed():  # a crash after the pointer moved, before the list: it was served
                served.add(current)
            if listed is None or served != set(listed):
                write_json_atomic(self._served, sorted(served))
            found = [v for v in self._committed(orphans=False) if v not in served]
            for version in found:
                write_json_atomic(self.root / str(version) / ORPHAN_FILE,
                                  {"reason": "written but never made current (a crash before the pointer moved); "
                                             "its documents are learned again by a later version",
                                   "flagged_at": time.time()})
            if found:  # the flags are inside the folders: a file replaced in the root tells every reader
                write_json_atomic(self._served, sorted(served))
            return found

    def manifest_mentions(self, version: int, text: str) -> bool:
        path = self.root / str(version) / MANIFEST_FILE
        return path.exists() and text.encode() in path.read_bytes()

    def empty_manifest(self, version: int) -> None:
        with self.lock:
            write_bytes_atomic(self.root / str(version) / MANIFEST_FILE, b"")
            write_json_atomic(self.root / REWRITTEN_FILE, read_json(self.root / REWRITTEN_FILE, 0) + 1)

    def rewrite_manifest(self, version: int, manifest: dict[str, Any]) -> None:
        with self.lock:
            if not 0 < version <= MAX_VERSION or not (self.root / str(version) / MANIFEST_FILE).exists():
                raise UnknownVersion(f"version {version} does not exist")
            write_json_atomic(self.root / str(version) / MANIFEST_FILE, manifest)
            write_json_atomic(self.root / REWRITTEN_FILE, read_json(self.root / REWRITTEN_FILE, 0) + 1)

    def load_delta(self, version: int) -> dict[str, torch.Tensor]:
        manifest = self.manifest(version)
        path = self.root / str(version) / manifest["delta_file"]
        if "erased_in" in manifest and not path.exists():
            return {}
        if sha256_file(path) != manifest["delta_sha256"]:
            raise ValueError(f"version {version}: delta file does not match its manifest hash")
        return load_file(str(path))

    def drop_delta(self, version: int) -> None:
        manifest = self._manifest(version)
        with self.lock:
            (self.root / str(version) / manifest["delta_file"]).unlink(missing_ok=True)

    def commit(self, parent: int, delta: dict[str, torch.Tensor], manifest: dict[str, Any], delta_file: str) -> int:
        """A new version from `parent`: the delta in `delta_file` (the method's file name), hashed in the manifest,
        every file synced before the folder is renamed into place (a power cut never leaves CURRENT naming a
        truncated delta)."""
        with self.lock:
            self.reconcile()
            if self.current() != parent:
                raise ParentMoved(f"trained from version {parent}, but version {self.current()} is now current")
            for document_id in manifest["documents"]:
                if (held := self.holding(document_id, parent)) is not None:
                    raise AlreadyCommitted(document_id, held)
            version = max(self._committed(), default=0) + 1  # an orphan's number is not reused
            tmp = self.root / f".tmp-{version}"
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
            save_file({k: v.contiguous() for k, v in delta.items()}, str(tmp / delta_file))
            fsync_file(tmp / delta_file)
            full = {**manifest, "version": version, "parent": parent, "created_at": time.time(),
                    "delta_file": delta_file, "delta_sha256": sha256_file(tmp / delta_file),
                    "delta_bytes": (tmp / delta_file).stat().st_size}
            write_json_atomic(tmp / MANIFEST_FILE, full)  # synced, and its folder too
            tmp.rename(self.root / str(version))
            fsync_dir(self.root)
            faults.kill_point("commit_renamed")
            self._move_pointer(version, "commit")
            return version

    def activate(self, version: int, why: str = "activate") -> None:
        with self.lock:
            self.reconcile()
            if not self.exists(version):
                raise UnknownVersion(f"version {version} does not exist")
            self._move_pointer(version, why)

    def events(self) -> list[dict[str, Any]]:
        return read_json(self._events, [])

    def _move_pointer(self, version: int, why: str) -> None:
        previous = self._pointed()
        write_bytes_atomic(self._pointer, f"{version}\n".encode())
        write_json_atomic(self._served, sorted({*read_json(self._served, []), version}))
        events = self.events()
        events.append({"version": version, "from": previous, "event": why, "at": time.time()})
        write_json_atomic(self._events, events[-200:])
