"""Low-rank deltas on chosen linear layers, one set per document, applied only for the routed documents.

Each target projection gets a forward hook that adds `scale * (x @ A.T) @ B.T` of each active document (those
not in training stacked along the rank: one product for all of them); with no active document (a prompt routed
nowhere) the hooks add nothing and the model computes exactly what the base model computes. B starts at zero, so
a fresh document also starts as the base model.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import nn

Tensors = dict[str, torch.Tensor]  # "<module name>.A" / ".B" -> tensor
STACKED_KEPT = 16  # sets of frozen documents whose stacked tensors are kept (a set per route in use)


@dataclass(frozen=True)
class LoraShape:
    rank: int = 4
    alpha: float = 8.0
    targets: tuple[str, ...] = ("gate_proj", "up_proj", "down_proj")  # projection names, in every decoder layer

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def target_modules(model: nn.Module, shape: LoraShape) -> dict[str, nn.Module]:
    """The target projections by name: plain linear layers, or the layers another method (PEFT) wrapped them in."""
    return {name: module for name, module in model.named_modules()
            if name.rsplit(".", 1)[-1] in shape.targets and hasattr(module, "in_features")}


class RoutedLora:
    """The hooks on `model`, and the documents' tensors they can apply."""

    def __init__(self, model: nn.Module, shape: LoraShape) -> None:
        self.shape = shape
        self.modules = target_modules(model, shape)
        self.documents: dict[str, Tensors] = {}
        self.sources: dict[str, int] = {}  # the version each committed document's tensors were read from
        self.active: tuple[str, ...] | None = None  # the documents whose deltas are on
        self.trained: str | None = None  # the document whose tensors are being trained (not stacked)
        self._stacked: OrderedDict[tuple, tuple[list[Tensors], Tensors]] = OrderedDict()
        for name, module in self.modules.items():
            module.register_forward_hook(self._hook(name))

    def _hook(self, name: str):
        def add_deltas(_module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
            for a, b in self._factors(name):  # the active documents' deltas add up (one subject's, or two subjects')
                out = out + (args[0].to(a.dtype) @ a.T @ b.T * self.shape.scale).to(out.dtype)
            return out
        return add_deltas

    def _factors(self, name: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The (A, B) pairs that give the active documents' deltas at one projection: the others' stacked into one
        pair of summed rank (one product however many documents a subject has), the trained one's on its own."""
        if not self.active:
            return []
        pairs = []
        if frozen := [d for d in self.active if d != self.trained]:
            pairs.append(self._stack(frozen))
        if self.trained in self.active:
            pairs.append(self.documents[self.trained])
        return [(t[f"{name}.A"], t[f"{name}.B"]) for t in pairs if f"{name}.A" in t]  # a delta may cover some layers

    def _stack(self, frozen: list[str]) -> Tensors:
        """The frozen documents' tensors concatenated along the rank, kept for the last few sets of documents (a
        document's tensors read again are a new dict, so they are stacked again)."""
        if len(frozen) == 1:
            return self.documents[frozen[0]]
        key = tuple((d, id(self.documents[d])) for d in frozen)
        if key not in self._stacked:
            held = [self.documents[d] for d in frozen]  # held with the entry: the ids in the key stay theirs
            stacked = {}
            for name in self.modules:
                pairs = [(t[f"{name}.A"], t[f"{name}.B"]) for t in held if f"{name}.A" in t]
                if pairs:
                    stacked[f"{name}.A"] = torch.cat([a for a, _ in pairs], dim=0).detach()
                    stacked[f"{name}.B"] = torch.cat([b for _, b in pairs], dim=1).detach()
            self._stacked[key] = (held, stacked)
            while len(self._stacked) > STACKED_KEPT:
                self._stacked.popitem(last=False)
        self._stacked.move_to_end(key)
        return self._stacked[key][1]

    def fresh(self, seed: int) -> Tensors:
        """New trainable tensors for one document: A small and random, B zero (the base model's output)."""
        gen = torch.Generator().manual_seed(seed)
        tensors: Tensors = {}
        for name, module in self.modules.items():
            a = torch.randn(self.shape.rank, module.in_features, generator=gen) / module.in_features**0.5
            device = next(module.parameters()).device
            tensors[f"{name}.A"] = nn.Parameter(a.to(device))
            tensors[f"{name}.B"] = nn.Parameter(torch.zeros(module.out_features, self.shape.rank, device=device))
        return tensors
