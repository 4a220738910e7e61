"""Serving the routed method: one low-rank delta per document, applied only to prompts routed to it.

A version holds the documents of its lineage in teaching order, each with its key (routing.py); removing
one drops it exactly. A prompt routed to no document runs the base model. A document's tensors are read when a
route first needs them, shared by every version that holds it, and kept while recently used (layer.py).
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from core.namespaces import SHARED, namespace_of, within
from core.served import OFF, Choice, LoadDelta, ServedMethod
from core.settings import Settings
from core.subjects import words
from methods.routed import routing
from methods.routed.config import RoutedSettings
from methods.routed.layer import LoraShape, RoutedLora
from methods.routed.routing import KeyIndex


@dataclass(frozen=True)
class Taught:
    """One document in a version: its id, its key, the version that stores its tensors, and its namespace."""
    document_id: str
    key: dict[str, float]
    version: int
    namespace: str = SHARED


class RoutedState:
    """The documents a version holds, in teaching order, and how to read their tensors. Assign `documents` (never
    change the list in place): the routing indexes built from them are dropped then."""

    def __init__(self, documents: list[Taught] | None = None, load_delta: LoadDelta | None = None) -> None:
        self.load_delta = load_delta  # reads a document's tensors from the version store when needed
        self.documents = documents or []

    @property
    def documents(self) -> list[Taught]:
        return self._documents

    @documents.setter
    def documents(self, documents: list[Taught]) -> None:
        self._documents = list(documents)
        self._namespaces = {d.namespace for d in self._documents}
        self._indexes: dict[frozenset[str] | None, KeyIndex] = {}

    def keys(self, namespaces: frozenset[str] | None = None) -> KeyIndex:
        """The keys of the documents in `namespaces` (None: all), in teaching order, indexed by their words."""
        if namespaces is not None and self._namespaces <= namespaces:
            namespaces = None  # all of them: one index, however they are asked for
        if namespaces not in self._indexes:
            self._indexes[namespaces] = KeyIndex([(d.document_id, d.key) for d in self._documents
                                                  if within(d.namespace, namespaces)])
        return self._indexes[namespaces]

    def append(self, taught: Taught) -> None:
        """One more document, last in teaching order. The indexes built so far that its namespace is in are extended
        by its key, not built again on the next route (0.25 s at 10,000 documents). One kept under a view it is not
        in held not every document before and does not now: `keys` finds it where it was."""
        self._documents = [*self._documents, taught]  # never in place: a snapshot keeps the list it had
        self._namespaces = self._namespaces | {taught.namespace}
        self._indexes = {namespaces: index.extended([(taught.document_id, taught.key)])
                         if within(taught.namespace, namespaces) else index
                         for namespaces, index in list(self._indexes.items())}  # a snapshot's routes may add one

    def snapshot(self) -> RoutedState:
        """The same documents, sharing the indexes built so far; it stays as it is when `documents` is assigned."""
        copy = object.__new__(RoutedState)
        copy.__dict__.update(self.__dict__)
        return copy


def compose(manifests: list[dict[str, Any]], load_delta: LoadDelta) -> RoutedState:
    """The documents a lineage holds: each committed one, less those removed since, and less those a later document
    retired (it replaced all they taught) unless that later document was removed in turn."""
    removed = {m["removes"] for m in manifests if m.get("removes")}
    taught: dict[str, Taught] = {}
    for manifest in manifests:
        document_id = manifest["documents"][0]
        if manifest.get("removes") or manifest.get("erased_in") or document_id in removed:
            continue
        for retired in manifest.get("retires", []):
            taught.pop(retired, None)
        taught.pop(document_id, None)  # committed again (a retried job): the newer one, at its place
        taught[document_id] = Taught(document_id, manifest["key"], manifest["version"], namespace_of(manifest))
    return RoutedState(list(taught.values()), load_delta)


def lora_shape(config: RoutedSettings) -> LoraShape:
    return LoraShape(config.rank, config.alpha, tuple(config.targets), config.layers)


def ensure_loaded(lora: RoutedLora, state: RoutedState) -> None:
    """Tell `lora` where each of the state's documents is stored; it reads them when a route needs them (a state
    with no store: its documents' tensors are in memory already)."""
    if state.load_delta is None:
        return
    for taught in state.documents:
        lora.register(taught.document_id, taught.version, partial(state.load_delta, taught.version))


class RoutedServed(ServedMethod):
    name = "routed"

    def __init__(self, model: nn.Module, settings: Settings) -> None:
        super().__init__(model, settings)
        self.lora = RoutedLora(model, lora_shape(self.config), self.config.resident)
        self._states: dict[int, RoutedState] = {0: RoutedState()}

    @staticmethod
    def compose(manifests: list[dict[str, Any]], load_delta: LoadDelta) -> RoutedState:
        state = compose(manifests, load_delta)
        state.keys()  # the index of every document, built before the swap (outside its lock), not by a request
        return state

    @staticmethod
    def extend(state: RoutedState | None, manifest: dict[str, Any], load_delta: LoadDelta) -> RoutedState | None:
        """A document taught for the first time goes last: the parent's indexes are extended by its key
        (RoutedState.append), not the lineage composed and every index built again (2.8 s at 100,000 documents). A
        removal, a retirement or a document taught again: None (composed)."""
        document_id = manifest["documents"][0]
        state = state or RoutedState(load_delta=load_delta)
        if manifest.get("removes") or manifest.get("retires") or \
                any(taught.document_id == document_id for taught in state.documents):
            return None
        grown = state.snapshot()
        grown.append(Taught(document_id, manifest["key"], manifest["version"], namespace_of(manifest)))
        grown.keys()  # extended from the parent's (built where the parent was composed), as every index it held
        return grown

    def add(self, version: int, state: RoutedState | None) -> None:
        state = state or RoutedState()
        ensure_loaded(self.lora, state)
        # The version's own document is read now: a crash can have cut only the newest delta (each is synced before
        # its version is made current), and a file that fails its hash must fail the install, not a request.
        self.lora.bring(tuple(t.document_id for t in state.documents if t.version == version))
        self._states[version] = state

    def route(self, version: int, prompt: str, namespaces: frozenset[str] | None = None) -> Hashable | None:
        return routing.route(prompt, self._states[version].keys(namespaces), self.config.threshold)

    def select(self, version: int, choice: Choice) -> tuple[Hashable | None, set[str]]:
        state = self._states[version]
        by_id = choice.documents & {taught.document_id for taught in state.documents}
        by_subject, found = routing.about(state.keys(choice.namespaces), choice.subjects)
        chosen = tuple(taught.document_id for taught in state.documents if taught.document_id in by_id | by_subject)
        return chosen or None, found | by_id

    def cite(self, version: int, prompt: str, route: Hashable | None) -> list[dict[str, Any]]:
        keys = self._states[version].keys()
        return [{"method": self.name, "document_id": document_id,
                 **routing.evidence(words(prompt), keys.key_of(document_id))} for document_id in route or ()]

    def use(self, version: int, route: Hashable | None = None) -> None:
        self.lora.activate(route)

    per_row = True  # a delta per row: prompts routed to different documents share a forward pass

    def use_rows(self, version: int, routes: list[Hashable | None]) -> None:
        self.lora.activate_rows([None if route == OFF else route for route in routes])

    def stats(self) -> dict[str, int]:
        return {"resident": len(self.lora.documents), "hits": self.lora.hits, "misses": self.lora.misses}

    def drop(self, version: int) -> None:
        self._states.pop(version, None)
        held = {taught.document_id for state in self._states.values() for taught in state.documents}
        for document_id in set(self.lora.sources) - held:
            self.lora.forget(document_id)


def empty_delta() -> dict[str, torch.Tensor]:
    """What a removal version stores: nothing (a removal is exact: the document is no longer in the version)."""
    return {"removed": torch.zeros(0)}
