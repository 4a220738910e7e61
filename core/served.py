"""The interface of an update method's serving side.

A method has two sides, both in its folder (methods/<name>/). Training (core.training.UpdateMethod): build
it on the model, load a state, train, give the delta, and optionally take one document out again. Serving
(this interface): compose the deltas of a version's lineage into a state, add a version's state to the served
model, use it for a decoding step (on the route the framework decided: core/routing/), drop it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:  # settings name the registry, which names this interface
    from core.settings import Settings

LoadDelta = Callable[[int], dict[str, torch.Tensor]]
OFF = "off"  # a route: none of the version's state, the method runs as in version 0


@dataclass(frozen=True)
class Choice:
    """The knowledge one request may use: the namespaces its prompt reaches (None: all, for the server's own
    callers), and the documents by id and subjects by name it names instead of routing (none: routing). A request
    that puts its knowledge before the prompt as text (service/in_context.py) is routed on the prompt it sent
    (`route_on`), and with `weights` False runs with every method off."""
    namespaces: frozenset[str] | None = None
    documents: frozenset[str] = frozenset()
    subjects: frozenset[str] = frozenset()
    weights: bool = True
    route_on: str | None = None

    def names(self) -> frozenset[str]:
        return self.documents | self.subjects

    @property
    def named(self) -> bool:
        return bool(self.names())


ROUTED = Choice()  # the prompt's routes, over every namespace


class ServedMethod(ABC):
    """One method's part of the served model, for every knowledge version a request may pin."""
    name: str  # the registered name: its settings are settings.method_config(name)

    def __init__(self, model: nn.Module, settings: Settings) -> None:
        self.model = model
        self.settings = settings
        self.config = settings.method_config(self.name)

    @staticmethod
    @abstractmethod
    def compose(manifests: list[dict[str, Any]], load_delta: LoadDelta) -> Any:
        """The method's state after the lineage's versions of it (manifests oldest first, never empty).
        The training side's `load` takes the same state."""

    @staticmethod
    def extend(state: Any, manifests: list[dict[str, Any]], load_delta: LoadDelta) -> Any:
        """The state after the last of `manifests`' versions (this method's, oldest first) made from `state`, the
        first one's parent's (None: the method learned nothing there), where the method can tell it without the
        lineage; None: `compose` the lineage instead."""
        return None

    @abstractmethod
    def add(self, version: int, state: Any) -> None:
        """Make `version`'s state ready (None: the method has learned nothing in that version)."""

    @abstractmethod
    def use(self, version: int, route: Hashable | None = None) -> None:
        """Called before each decoding step of a request pinned to `version` (under the serving lock). `route`: for a
        per-document method, the documents of its own the framework routed the prompt to (core/routing/; None: none);
        for a whole-version method, None (its whole state) or OFF (none of it: the request named documents)."""

    per_row = False  # whether rows of one forward pass may each have their own route (use_rows)

    def use_rows(self, version: int, routes: list[Hashable | None]) -> None:
        """Like `use`, with a route per row of the batch (None or OFF: none of this method's knowledge on that row).
        Only for a method with `per_row`."""
        raise NotImplementedError(f"{self.name} decides its state for a whole forward pass")

    def stats(self) -> dict[str, int]:
        """Counters for /metrics: `resident` (deltas in memory), `hits` and `misses` (a route's delta found in memory,
        or read from its version); a method that holds everything in memory has none."""
        return {}

    @abstractmethod
    def drop(self, version: int) -> None:
        """No request needs `version` any more."""
