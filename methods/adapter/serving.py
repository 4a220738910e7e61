"""Serving the adapter method: one LoRA adapter per version in use, switched only when the version changes.

A version's adapter is the one of the last adapter update in its lineage (each update continues the
previous adapter). A version with none uses version 0's adapter, whose B matrices are zero.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from core.served import LoadDelta, ServedMethod
from core.settings import Settings
from methods.adapter import layer as adapter
from methods.adapter.layer import LoraState


def adapter_name(version: int) -> str:
    return f"v{version}"


class AdapterServed(ServedMethod):
    name = "adapter"

    def __init__(self, model: nn.Module, settings: Settings) -> None:
        super().__init__(model, settings)
        self._base_config = adapter.settings_config(self.config)
        self.peft = adapter.attach(model, self._base_config, adapter_name(0))  # LoRA layers injected in place
        self._adapter_of: dict[int, str] = {0: adapter_name(0)}
        # Switching walks every layer, so only on change (docs/decisions.md: Switch the served adapter only
        # on a version change).
        self._active = adapter_name(0)

    @staticmethod
    def compose(manifests: list[dict[str, Any]], load_delta: LoadDelta) -> LoraState:
        last = manifests[-1]
        return LoraState(load_delta(last["version"]), last["lora"])

    def add(self, version: int, state: LoraState | None) -> None:
        if state is None:  # nothing learned by this method: version 0's adapter
            self._adapter_of[version] = adapter_name(0)
            return
        name = adapter_name(version)
        self.peft.add_adapter(name, adapter.config_from_dict(state.config))
        adapter.write_state(self.peft, name, state.tensors)
        self._adapter_of[version] = name

    def use(self, version: int, route: None = None) -> None:
        name = self._adapter_of[version]
        if name != self._active:
            self.peft.base_model.set_adapter(name)
            self._active = name

    def drop(self, version: int) -> None:
        name = self._adapter_of.pop(version)
        if name != adapter_name(0):
            self.peft.delete_adapter(name)
            if self._active == name:  # PEFT fell back to another adapter: switch again next time
                self._active = ""
