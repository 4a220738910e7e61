"""The frozen base model under whatever the methods attached to it.

A method's layer that should step aside says so: `carries_knowledge = True` and an `enabled` flag (the memory
layer). PEFT's tuner layers (the adapter method) have their own switch.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn


@contextlib.contextmanager
def base_only(model: nn.Module) -> Iterator[None]:
    """Switch off every attached knowledge layer for the block (the model may be a PEFT wrapper or the model PEFT
    injected its layers into)."""
    layers = [m for m in model.modules() if getattr(m, "carries_knowledge", False) and m.enabled]
    adapters = [m for m in model.modules() if isinstance(m, BaseTunerLayer) and not m.disable_adapters]
    for layer in layers:
        layer.enabled = False
    for adapter in adapters:
        adapter.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enabled = True
        for adapter in adapters:
            adapter.enable_adapters(True)
