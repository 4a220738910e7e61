"""Low-rank deltas on chosen linear layers, one set per document, applied only for the routed documents.

Each target projection gets a forward hook that adds `scale * (x @ A.T) @ B.T` of each active document;
with no active document (a prompt routed nowhere) the hooks add nothing and the model computes exactly
what the base model computes. B starts at zero, so a fresh document also starts as the base model.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

Tensors = dict[str, torch.Tensor]  # "<module name>.A" / ".B" -> tensor


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
        for name, module in self.modules.items():
            module.register_forward_hook(self._hook(name))

    def _hook(self, name: str):
        def add_deltas(_module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
            for document_id in self.active or ():  # the documents' deltas add up (one subject's, or two subjects')
                tensors = self.documents[document_id]
                a, b = tensors.get(f"{name}.A"), tensors.get(f"{name}.B")
                if a is not None:  # a delta may cover only some of the target layers
                    out = out + (args[0].to(a.dtype) @ a.T @ b.T * self.shape.scale).to(out.dtype)
            return out
        return add_deltas

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
