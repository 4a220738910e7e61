"""What a version knows, document by document: the documents of its per-document methods in teaching order, each with
its key, namespace and method, and their keys indexed per set of namespaces. Composed from a lineage's manifests;
the learner and the server route with it alike."""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from core.namespaces import SHARED, namespace_of, within
from core.routing.index import KeyIndex
from core.served import OFF

Route = tuple[str, ...] | None  # the documents a prompt is routed to, in teaching order (None: none)


@dataclass(frozen=True)
class Taught:
    """One document in a version: its id, its key, the version that stores its delta, its namespace and method."""
    document_id: str
    key: dict[str, float]
    version: int
    namespace: str = SHARED
    method: str = ""


class Table:
    """The documents a version holds, in teaching order. Assign `documents` (never change the list in place): the
    routing indexes built from them are dropped then."""

    def __init__(self, documents: Iterable[Taught] = ()) -> None:
        self.documents = list(documents)

    @property
    def documents(self) -> list[Taught]:
        return self._documents

    @documents.setter
    def documents(self, documents: list[Taught]) -> None:
        self._documents = list(documents)
        self._namespaces = {d.namespace for d in self._documents}
        self._methods = {d.document_id: d.method for d in self._documents}
        self._indexes: dict[frozenset[str] | None, KeyIndex] = {}

    def method_of(self, document_id: str) -> str | None:
        return self._methods.get(document_id)

    def keys(self, namespaces: frozenset[str] | None = None) -> KeyIndex:
        """The keys of the documents in `namespaces` (None: all), in teaching order, indexed by their words."""
        if namespaces is not None and self._namespaces <= namespaces:
            namespaces = None  # all of them: one index, however they are asked for
        if namespaces not in self._indexes:
            self._indexes[namespaces] = KeyIndex([(d.document_id, d.key) for d in self._documents
                                                  if within(d.namespace, namespaces)])
        return self._indexes[namespaces]

    def extend(self, taught: list[Taught]) -> None:
        """More documents, last in teaching order. The indexes built so far that their namespaces are in are extended
        by their keys, not built again on the next route (0.25 s at 10,000 documents). One kept under a view a
        document is not in held not every document before and does not now: `keys` finds it where it was."""
        self._documents = [*self._documents, *taught]  # never in place: a snapshot keeps the list it had
        self._namespaces = self._namespaces | {t.namespace for t in taught}
        self._methods = {**self._methods, **{t.document_id: t.method for t in taught}}
        self._indexes = {namespaces: index.extended(keys) if (keys := [(t.document_id, t.key) for t in taught
                                                                       if within(t.namespace, namespaces)]) else index
                         for namespaces, index in list(self._indexes.items())}  # a snapshot's routes may add one

    def snapshot(self) -> Table:
        """The same documents, sharing the indexes built so far; it stays as it is when `documents` is assigned."""
        copy = object.__new__(Table)
        copy.__dict__.update(self.__dict__)
        return copy


def taught(manifest: dict[str, Any]) -> Taught:
    return Taught(manifest["documents"][0], manifest["key"], manifest["version"], namespace_of(manifest),
                  manifest["method"])


def compose(manifests: list[dict[str, Any]]) -> Table:
    """The documents a lineage holds (manifests oldest first; only those with a key count: a per-document method's):
    each committed one, less those removed since, and less those a later document retired (it replaced all they
    taught) unless that later document was removed in turn."""
    manifests = [m for m in manifests if "key" in m or m.get("removes")]
    removed = {m["removes"] for m in manifests if m.get("removes")}
    held: dict[str, Taught] = {}
    for manifest in manifests:
        document_id = manifest["documents"][0] if manifest["documents"] else None
        if manifest.get("removes") or manifest.get("erased_in") or document_id in removed:
            continue
        for retired in manifest.get("retires", []):
            held.pop(retired, None)
        held.pop(document_id, None)  # committed again (a retried job): the newer one, at its place
        held[document_id] = taught(manifest)
    return Table(held.values())


def extended(table: Table, manifests: list[dict[str, Any]]) -> Table | None:
    """The table of the last of `manifests`' versions (oldest first) made from the table of the first one's parent:
    each document taught for the first time goes last, the parent's indexes extended by their keys at once (not the
    lineage composed and every index built again: 2.8 s at 100,000 documents; nor the tables copied once a version).
    A removal, a retirement or a document taught again: None (compose the lineage). A manifest without a key (a
    whole-version method's) changes nothing."""
    added: list[Taught] = []
    for manifest in manifests:
        if manifest.get("removes") or manifest.get("retires"):
            return None
        if "key" not in manifest:
            continue
        document_id = manifest["documents"][0]
        if table.method_of(document_id) is not None or any(t.document_id == document_id for t in added):  # again
            return None
        added.append(taught(manifest))
    if not added:
        return table
    grown = table.snapshot()
    grown.extend(added)
    grown.keys()  # extended from the parent's (built where the parent was composed), as every index it held
    return grown


def by_method(route: Route, method_of: Callable[[str], str | None], per_document: dict[str, bool],
              off: bool = False) -> dict[str, Hashable | None]:
    """Each method's part of one route over documents: a per-document method's documents in it (None: none of them),
    a whole-version method's whole state (None), or none of it (OFF) where `off` (a request that names its knowledge:
    only documents can be named)."""
    return {name: (tuple(d for d in route or () if method_of(d) == name) or None) if each else (OFF if off else None)
            for name, each in per_document.items()}
