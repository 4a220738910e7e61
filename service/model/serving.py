"""The served model: base weights plus one LoRA adapter per knowledge version in use.

A request pins the version that is current when it starts and every one of its decoding steps runs
with that version's adapter, so a swap never mixes two versions inside one answer. A new version is
added between two decoding steps (both hold the same lock), and an old one is dropped once no
request pins it.
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import torch
from peft import LoraConfig, PeftModel

from service.knowledge import adapter
from service.knowledge.versions import VersionStore
from service.model.loader import LoadedModel

T = TypeVar("T")


def adapter_name(version: int) -> str:
    return f"v{version}"


class ServingModel:
    def __init__(self, loaded: LoadedModel, base_config: LoraConfig) -> None:
        self.tokenizer = loaded.tokenizer
        self.device = loaded.device
        self.name = loaded.name
        self.peft: PeftModel = adapter.attach(loaded.model, base_config, adapter_name(0))
        self._lock = threading.Lock()
        self._pins: Counter[int] = Counter()
        self._loaded: set[int] = {0}
        self._active = 0  # the adapter PEFT has active; switching walks every layer, so only on change
        self.current = 0

    def install(self, version: int, state: dict[str, torch.Tensor] | None, config: LoraConfig | None) -> None:
        """Make `version` current. Version 0 (the base model) needs no state."""
        with self._lock:
            if version not in self._loaded:
                assert state is not None and config is not None
                name = adapter_name(version)
                self.peft.add_adapter(name, config)
                adapter.write_state(self.peft, name, state)
                self._loaded.add(version)
            self.current = version
            self._drop_unused()

    def _drop_unused(self) -> None:
        for version in list(self._loaded):
            if version not in (0, self.current) and self._pins[version] == 0:
                self.peft.delete_adapter(adapter_name(version))
                self._loaded.discard(version)
                if self._active == version:  # PEFT fell back to another adapter: force a switch next time
                    self._active = -1

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
            return fn(self.peft)


def install_committed(serving: ServingModel, versions: VersionStore, version: int) -> None:
    """Make a committed version of the store current on the served model (its delta checked by hash)."""
    if version == 0:
        serving.install(0, None, None)
        return
    manifest = versions.manifest(version)
    serving.install(version, versions.load_delta(version), adapter.config_from_dict(manifest["lora"]))
