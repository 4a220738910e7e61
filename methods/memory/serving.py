"""Serving the memory method: one shared value table; a version's rows are written before its decoding steps.

The memory is attached with the first version that has rows (its keys come from the data folder's
version-0 state). Switching versions clears the rows the previous version wrote and writes the next
one's, touching only those rows.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from core.served import LoadDelta, ServedMethod
from core.settings import Settings
from core.storage import method_files
from methods.memory import layer as memory_layer

Rows = tuple[torch.Tensor, torch.Tensor]  # slot indices [n], values [n, hidden]


def compose_rows(deltas: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Rows and values after applying sparse deltas in order: for a row written twice, the last value."""
    rows = torch.cat([d["rows"].long() for d in deltas])
    values = torch.cat([d["values"] for d in deltas])
    unique, inverse = torch.unique(rows, return_inverse=True)
    last = torch.full((unique.numel(),), -1, dtype=torch.long).scatter_reduce(
        0, inverse, torch.arange(rows.numel()), reduce="amax")
    return {"rows": unique, "values": values[last]}


class MemoryServed(ServedMethod):
    name = "memory"

    def __init__(self, model: nn.Module, settings: Settings) -> None:
        super().__init__(model, settings)
        self.memory: memory_layer.ProductKeyMemory | None = None
        self._rows: dict[int, Rows] = {}
        self._active = 0  # the version whose rows are in the table

    @staticmethod
    def compose(manifests: list[dict[str, Any]], load_delta: LoadDelta) -> dict[str, torch.Tensor]:
        return compose_rows([load_delta(m["version"]) for m in manifests])

    def add(self, version: int, state: dict[str, torch.Tensor] | None) -> None:
        if state is None:
            return
        if self.memory is None:
            files = method_files(self.settings, "memory")
            files.fetch(memory_layer.BASE_FILES)  # made by the learner, where no folder is shared
            self.memory = memory_layer.attach_base(self.model, files.folder)
            if self.memory is None:
                raise FileNotFoundError(f"no memory base state in {files.folder}")
        self._rows[version] = (state["rows"], state["values"])

    def use(self, version: int, route: None = None) -> None:
        if self.memory is None or version == self._active:
            return
        memory_layer.clear_rows(self.memory, self._rows.get(self._active, (None, None))[0])
        memory_layer.write_rows(self.memory, *self._rows.get(version, (None, None)))
        self._active = version

    def drop(self, version: int) -> None:
        if self._active == version:
            self.use(0)
        self._rows.pop(version, None)
