"""The update methods, registered once: each names its serving side and its training side.

Adding a method: a serving module here (a ServedMethod), a training module in workers/methods (an
UpdateMethod), and one `register` call below (or in your own code before the app starts).
"""
from __future__ import annotations

from service.knowledge.methods.adapter import AdapterServed
from service.knowledge.methods.base import MethodSpec, ServedMethod
from service.knowledge.methods.memory import MemoryServed
from service.knowledge.methods.routed import RoutedServed

_REGISTRY: dict[str, MethodSpec] = {}


class UnknownMethod(KeyError):
    pass


def register(spec: MethodSpec) -> MethodSpec:
    """Add (or replace) a method; the order of registration is the order methods are built and applied."""
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def get(name: str) -> MethodSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownMethod(name) from None


def registered() -> list[MethodSpec]:
    return list(_REGISTRY.values())


def servable() -> list[str]:
    return [spec.name for spec in _REGISTRY.values() if spec.servable]


register(MethodSpec("adapter", AdapterServed, "workers.methods.adapter:AdapterMethod", "adapter.safetensors"))
register(MethodSpec("memory", MemoryServed, "workers.methods.memory:MemoryMethod", "memory_rows.safetensors",
                    removable=True))
register(MethodSpec("routed", RoutedServed, "workers.methods.routed:RoutedMethod", "routed_lora.safetensors",
                    removable=True))

__all__ = ["MethodSpec", "ServedMethod", "UnknownMethod", "get", "register", "registered", "servable", "unregister"]
