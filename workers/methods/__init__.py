"""Update methods: one module each, all behind `UpdateMethod` (see base.py)."""
from __future__ import annotations

from workers.methods.adapter import AdapterMethod
from workers.methods.base import UpdateMethod
from workers.methods.full import FullMethod
from workers.methods.memory import MemoryMethod

REGISTRY: dict[str, type[UpdateMethod]] = {m.name: m for m in (AdapterMethod, FullMethod, MemoryMethod)}

__all__ = ["REGISTRY", "AdapterMethod", "FullMethod", "MemoryMethod", "UpdateMethod"]
