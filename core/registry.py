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
    # Its documents answer only the prompts routed to them, so they can be kept to a namespace (a tenant may teach
    # with it; core/namespaces.py) and chosen one by one per request.
    routed: bool = False
    # Why a document (text, its probes as (prompt, answer)) can never be learned, decided at POST with the method's
    # settings before anything is stored; None: it may be.
    refusal: Callable[[str, list[tuple[str, str]], Any], str | None] | None = None
    # The prompts of a document's probes that could not reach what it teaches, with the method's settings (a
    # routed method's; None: every prompt can). What the trainer's `unreachable` says, without a model.
    unreachable: Callable[[str, list[tuple[str, str]], Any], list[str]] | None = None


_REGISTRY: dict[str, MethodSpec] = {}


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
