"""Serving the routed method: one low-rank delta per document, applied only to the rows routed to it.

Which documents a prompt is routed to is the framework's (core/routing/); this side keeps where each document's
tensors are stored, reads them when a route first needs them (shared by every version that holds them), and keeps
them while recently used (layer.py).
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import nn

from core.routing.table import compose as compose_table
from core.served import OFF, LoadDelta, ServedMethod
from core.settings import Settings
from methods.routed.config import RoutedSettings
from methods.routed.layer import LoraShape, RoutedLora


@dataclass
class Deltas:
    """The routed documents a version holds, each with the version that stores its delta, and how to read them."""
    stored_in: dict[str, int] = field(default_factory=dict)  # document id -> version
    load_delta: LoadDelta | None = None  # None: the tensors are in memory already


def lora_shape(config: RoutedSettings) -> LoraShape:
    return LoraShape(config.rank, config.alpha, tuple(config.targets), config.layers)


def ensure_loaded(lora: RoutedLora, state: Deltas) -> None:
    """Tell `lora` where each of the state's documents is stored; it reads them when a route needs them."""
    if state.load_delta is None:
        return
    for document_id, version in state.stored_in.items():
        lora.register(document_id, version, partial(state.load_delta, version))


class RoutedServed(ServedMethod):
    name = "routed"

    def __init__(self, model: nn.Module, settings: Settings) -> None:
        super().__init__(model, settings)
        self.lora = RoutedLora(model, lora_shape(self.config), self.config.resident)
        self._states: dict[int, Deltas] = {0: Deltas()}

    @staticmethod
    def compose(manifests: list[dict[str, Any]], load_delta: LoadDelta) -> Deltas:
        """The documents the lineage's routing table holds (removed and retired ones left out), where each is stored."""
        return Deltas({t.document_id: t.version for t in compose_table(manifests).documents}, load_delta)

    @staticmethod
    def extend(state: Deltas | None, manifests: list[dict[str, Any]], load_delta: LoadDelta) -> Deltas | None:
        """Documents taught for the first time are more deltas; a removal, a retirement, a document taught again or
        one erased since (no key, and no delta file): None (composed)."""
        stored = dict((state or Deltas()).stored_in)
        for manifest in manifests:
            document_id = manifest["documents"][0]
            if manifest.get("removes") or manifest.get("retires") or "key" not in manifest or document_id in stored:
                return None
            stored[document_id] = manifest["version"]
        return Deltas(stored, load_delta)

    def add(self, version: int, state: Deltas | None) -> None:
        state = state or Deltas()
        ensure_loaded(self.lora, state)
        # The version's own document is read now: a crash can have cut only the newest delta (each is synced before
        # its version is made current), and a file that fails its hash must fail the install, not a request.
        self.lora.bring(tuple(d for d, stored in state.stored_in.items() if stored == version))
        self._states[version] = state

    def use(self, version: int, route: Hashable | None = None) -> None:
        self.lora.activate(route)

    per_row = True  # a delta per row: prompts routed to different documents share a forward pass

    def use_rows(self, version: int, routes: list[Hashable | None]) -> None:
        self.lora.activate_rows([None if route == OFF else route for route in routes])

    def stats(self) -> dict[str, int]:
        return {"resident": len(self.lora.documents), "hits": self.lora.hits, "misses": self.lora.misses}

    def drop(self, version: int) -> None:
        self._states.pop(version, None)
        held = {document_id for state in self._states.values() for document_id in state.stored_in}
        for document_id in set(self.lora.sources) - held:
            self.lora.forget(document_id)


def empty_delta() -> dict[str, torch.Tensor]:
    """What a removal version stores: nothing (a removal is exact: the document is no longer in the version)."""
    return {"removed": torch.zeros(0)}
