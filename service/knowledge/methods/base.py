"""What registers an update method, and the interface of its serving side.

A method has two sides. Training (workers/methods/<name>.py): build it on the model, load a state,
train, give the delta, and optionally take one document out again. Serving (a module here): compose the
deltas of a version's lineage into a state, add a version's state to the served model, use it for a
decoding step, drop it. `service` never imports `workers`, so the registry names the training side by
its import path.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from service.settings import Settings

LoadDelta = Callable[[int], dict[str, torch.Tensor]]


class ServedMethod(ABC):
    """One method's part of the served model, for every knowledge version a request may pin."""

    def __init__(self, model: nn.Module, settings: Settings) -> None:
        self.model = model
        self.settings = settings

    @staticmethod
    @abstractmethod
    def compose(manifests: list[dict[str, Any]], load_delta: LoadDelta) -> Any:
        """The method's state after the lineage's versions of it (manifests oldest first, never empty).
        The training side's `load` takes the same state."""

    @abstractmethod
    def add(self, version: int, state: Any) -> None:
        """Make `version`'s state ready (None: the method has learned nothing in that version)."""

    def route(self, version: int, prompt: str) -> Hashable | None:
        """What of `version`'s state a prompt uses, decided once per request (a method that routes, e.g. to one
        document's delta, says where; None: the whole state, or nothing routed)."""
        return None

    @abstractmethod
    def use(self, version: int, route: Hashable | None = None) -> None:
        """Called before each decoding step of a request pinned to `version` (under the serving lock)."""

    @abstractmethod
    def drop(self, version: int) -> None:
        """No request needs `version` any more."""


@dataclass(frozen=True)
class MethodSpec:
    name: str
    served: type[ServedMethod]
    trainer: str | type  # the training side: "package.module:Class", or the class itself
    delta_file: str  # what a version of this method stores, in versions/<n>/
    servable: bool = True  # documents may ask for it (POST /documents "method")
    removable: bool = False  # one document's contribution can be taken out (DELETE /documents/{id})
