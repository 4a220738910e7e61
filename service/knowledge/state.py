"""What a version holds: the adapter of the last adapter update in its lineage, and every memory row
written along it (a later write of a row wins). Memory versions store only the rows they changed."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from service.knowledge.versions import VersionStore


@dataclass
class KnowledgeState:
    adapter: dict[str, torch.Tensor] | None = None  # None: version 0's adapter (B = 0)
    adapter_config: dict[str, Any] | None = None  # the manifest's "lora" entry
    memory_rows: torch.Tensor | None = None  # [n] slot indices
    memory_values: torch.Tensor | None = None  # [n, hidden]

    @property
    def memory(self) -> dict[str, torch.Tensor] | None:
        if self.memory_rows is None:
            return None
        return {"rows": self.memory_rows, "values": self.memory_values}


def compose_rows(deltas: list[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows and values after applying sparse deltas in order: for a row written twice, the last value."""
    rows = torch.cat([d["rows"].long() for d in deltas])
    values = torch.cat([d["values"] for d in deltas])
    unique, inverse = torch.unique(rows, return_inverse=True)
    last = torch.full((unique.numel(),), -1, dtype=torch.long).scatter_reduce(
        0, inverse, torch.arange(rows.numel()), reduce="amax")
    return unique, values[last]


def resolve(versions: VersionStore, version: int) -> KnowledgeState:
    state = KnowledgeState()
    memory_deltas = []
    for manifest in reversed(versions.lineage(version)):
        if manifest["method"] == "memory":
            memory_deltas.append(versions.load_delta(manifest["version"]))
        elif state.adapter is None:
            state.adapter, state.adapter_config = versions.load_delta(manifest["version"]), manifest["lora"]
    if memory_deltas:
        state.memory_rows, state.memory_values = compose_rows(memory_deltas[::-1])
    return state


def learned_manifests(versions: VersionStore, version: int) -> list[dict[str, Any]]:
    """The manifests along the lineage whose documents still count (a later removal takes one out)."""
    lineage = versions.lineage(version)
    removed = {m["removes"] for m in lineage if m.get("removes")}
    return [m for m in lineage if not removed & set(m["documents"])]
