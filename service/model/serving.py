"""The served model: base weights plus, per knowledge version in use, a LoRA adapter and memory rows.

A request pins the version that is current when it starts and every one of its decoding steps runs
with that version's adapter and memory rows, so a swap never mixes two versions inside one answer. A
new version is added between two decoding steps (both hold the same lock), and an old one is dropped
once no request pins it. The memory table is shared: switching versions clears the rows the previous
version wrote and writes the next one's, touching only those rows.
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import torch
from peft import LoraConfig, PeftModel

from service.knowledge import adapter
from service.knowledge import memory as memory_layer
from service.knowledge.state import KnowledgeState, resolve
from service.knowledge.versions import VersionStore
from service.model.loader import LoadedModel

T = TypeVar("T")


def adapter_name(version: int) -> str:
    return f"v{version}"


class ServingModel:
    def __init__(self, loaded: LoadedModel, base_config: LoraConfig, memory_dir: Path | None = None) -> None:
        self.tokenizer = loaded.tokenizer
        self.device = loaded.device
        self.name = loaded.name
        self.peft: PeftModel = adapter.attach(loaded.model, base_config, adapter_name(0))
        self._version_0_adapter = adapter.read_state(self.peft, adapter_name(0))
        self._base_config = base_config
        self._memory_dir = memory_dir
        self.memory: memory_layer.ProductKeyMemory | None = None  # attached with the first memory version
        self._rows: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # memory rows and values per loaded version
        self._lock = threading.Lock()
        self._pins: Counter[int] = Counter()
        self._loaded: set[int] = {0}
        self._active = 0  # the adapter PEFT has active; switching walks every layer, so only on change
        self._rows_active = 0  # the version whose memory rows are in the table
        self.current = 0

    def install(self, version: int, state: KnowledgeState | None) -> None:
        """Make `version` current. Version 0 (the base model) needs no state."""
        with self._lock:
            if version not in self._loaded:
                assert state is not None
                name = adapter_name(version)
                config = adapter.config_from_dict(state.adapter_config) if state.adapter_config else self._base_config
                self.peft.add_adapter(name, config)
                adapter.write_state(self.peft, name, state.adapter if state.adapter is not None
                                    else self._version_0_adapter)
                if state.memory_rows is not None:
                    self._ensure_memory()
                    self._rows[version] = (state.memory_rows, state.memory_values)
                self._loaded.add(version)
            self.current = version
            self._drop_unused()

    def _ensure_memory(self) -> None:
        if self.memory is None:
            assert self._memory_dir is not None, "a memory version needs the data folder's memory"
            self.memory = memory_layer.attach_base(self.peft, self._memory_dir)
            if self.memory is None:
                raise FileNotFoundError(f"no memory base state in {self._memory_dir}")

    def _drop_unused(self) -> None:
        for version in list(self._loaded):
            if version not in (0, self.current) and self._pins[version] == 0:
                self.peft.delete_adapter(adapter_name(version))
                self._loaded.discard(version)
                if self._active == version:  # PEFT fell back to another adapter: force a switch next time
                    self._active = -1
                if self._rows_active == version:
                    self._switch_rows(0)
                self._rows.pop(version, None)

    def _switch_rows(self, version: int) -> None:
        if self.memory is None or version == self._rows_active:
            return
        old_rows, _ = self._rows.get(self._rows_active, (None, None))
        memory_layer.clear_rows(self.memory, old_rows)
        memory_layer.write_rows(self.memory, *self._rows.get(version, (None, None)))
        self._rows_active = version

    @contextmanager
    def pinned(self) -> Iterator[int]:
        with self._lock:
            version = self.current
            self._pins[version] += 1
        try:
            yield version
        finally:
            with self._lock:
                self._pins[version] -= 1
                self._drop_unused()

    def run(self, version: int, fn: Callable[[PeftModel], T]) -> T:
        """Run fn on the model with `version`'s adapter active; one call is one decoding step."""
        with self._lock, torch.inference_mode():
            if version != self._active:
                self.peft.base_model.set_adapter(adapter_name(version))
                self._active = version
            self._switch_rows(version)
            return fn(self.peft)


def install_committed(serving: ServingModel, versions: VersionStore, version: int) -> None:
    """Make a committed version of the store current on the served model (its deltas checked by hash)."""
    serving.install(version, resolve(versions, version) if version else None)
