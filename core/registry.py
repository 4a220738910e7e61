"""The registry of update methods: each method folder (methods/<name>/) registers itself once.

A method has a serving side (core.served.ServedMethod), a training side (core.training.UpdateMethod) and a
configuration of its own (a pydantic-settings class read from CKL_<NAME>_*). `core` never imports `methods`:
whoever builds a server or a learner imports the `methods` package first, which registers every folder in it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic_settings import BaseSettings

from core.served import ServedMethod


@dataclass(frozen=True)
class MethodSpec:
    name: str
    served: type[ServedMethod]
    trainer: type  # a core.training.UpdateMethod
    config: type[BaseSettings]  # the method's own settings (CKL_<NAME>_*)
    delta_file: str  # what a version of this method stores, in versions/<n>/
    servable: bool = True  # documents may ask for it (POST /documents "method")
    removable: bool = False  # one document's contribution can be taken out (DELETE /documents/{id})
    # Each document gets state of its own, used only for the prompts the framework routes to it (core/routing/): its
    # documents can be kept to a namespace (a tenant may teach with it) and chosen one by one per request. Otherwise
    # every update continues one state, which every prompt uses (the route is the whole version).
    per_document: bool = False
    # Writes a version as files another engine serves: (versions, version, out folder, base model) -> the folder.
    export: Callable[..., Any] | None = None

_REGISTRY: dict[str, MethodSpec] = {}


class NotExportable(ValueError):
    """A version a method's export cannot write (another method's knowledge in it, or none)."""


class UnknownMethod(KeyError):
    pass


class DuplicateMethod(ValueError):
    pass


def register(spec: MethodSpec) -> MethodSpec:
    """Add a method; the order of registration is the order methods are built and applied. A second method of
    the same name is refused: two folders must not fight over one name."""
    if spec.name in _REGISTRY and _REGISTRY[spec.name] != spec:
        raise DuplicateMethod(f"a method named {spec.name!r} is already registered")
    if {spec.served.name, spec.trainer.name} != {spec.name}:  # each side reads its settings by its own name
        raise ValueError(f"method {spec.name!r}: its sides are named {spec.served.name!r} and {spec.trainer.name!r}")
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
