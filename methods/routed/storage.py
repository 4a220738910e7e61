"""How a routed document's factors are stored: float32, bfloat16, or int8 with one scale per rank component.

int8 keeps a quarter of float32: each factor's rank components (the rows of A, the columns of B) are scaled to
[-127, 127] and rounded, so a component's error is at most half of its own largest value / 127. The scales of a
file are one float32 tensor, SCALES, in the sorted order of the factors' names; a file without it holds its
factors in a float dtype as they are.
"""
from __future__ import annotations

import torch

Tensors = dict[str, torch.Tensor]
SCALES = "int8_scales"


def _component_axis(name: str) -> int:
    """The axis along which one rank component's values lie: A is [rank, in] (a row), B is [out, rank] (a column)."""
    return 1 if name.endswith(".A") else 0


def pack(tensors: Tensors, storage: str) -> Tensors:
    """The tensors as they are written for `storage`."""
    if storage != "int8":
        return {k: v.detach().cpu().to(getattr(torch, storage), copy=True) for k, v in tensors.items()}
    packed, scales = {}, []
    for name in sorted(tensors):
        value = tensors[name].detach().cpu().float()
        scale = value.abs().amax(dim=_component_axis(name)).clamp_min(1e-12) / 127
        shaped = scale.unsqueeze(_component_axis(name))
        packed[name] = torch.round(value / shaped).clamp(-127, 127).to(torch.int8)
        scales.append(scale)
    packed[SCALES] = torch.stack(scales) if scales else torch.zeros(0)
    return packed


def unpack(stored: Tensors) -> Tensors:
    """The factors a file holds, in float32 for int8 and in their own dtype otherwise."""
    if SCALES not in stored:
        return dict(stored)
    names = sorted(k for k in stored if k != SCALES)
    return {name: stored[name].float() * stored[SCALES][i].unsqueeze(_component_axis(name))
            for i, name in enumerate(names)}
