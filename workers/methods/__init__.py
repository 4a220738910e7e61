"""Update methods: one module each, all behind `UpdateMethod` (see base.py)."""
from __future__ import annotations

from workers.methods.adapter import AdapterMethod
from workers.methods.base import UpdateMethod

REGISTRY: dict[str, type[UpdateMethod]] = {AdapterMethod.name: AdapterMethod}

__all__ = ["REGISTRY", "UpdateMethod", "AdapterMethod"]
