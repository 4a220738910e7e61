"""What a version holds: for each method that learned something along its lineage, the state its serving
side composes from those versions' deltas (the adapter: the last adapter; the memory: every row written,
a later write of a row winning)."""
from __future__ import annotations

from typing import Any

from core import registry
from core.versions import VersionStore

KnowledgeState = dict[str, Any]  # method name -> its composed state; a method absent has learned nothing


def resolve(versions: VersionStore, version: int) -> KnowledgeState:
    by_method: dict[str, list[dict[str, Any]]] = {}
    for manifest in versions.lineage(version):
        by_method.setdefault(manifest["method"], []).append(manifest)
    return {name: registry.get(name).served.compose(manifests, versions.load_delta)
            for name, manifests in by_method.items()}


def restored_by(versions: VersionStore, version: int) -> list[str]:
    """Documents that `version` holds and that a removal along the current lineage took out since: serving
    `version` again would bring them back."""
    removed = {m["removes"] for m in versions.lineage(versions.current()) if m.get("removes")}
    held = {d for m in learned_manifests(versions, version) for d in m["documents"]} if version else set()
    return sorted(removed & held)


def learned_manifests(versions: VersionStore, version: int) -> list[dict[str, Any]]:
    """The manifests along the lineage whose documents still count (a later removal takes one out)."""
    lineage = versions.lineage(version)
    removed = {m["removes"] for m in lineage if m.get("removes")}
    return [m for m in lineage if not removed & set(m["documents"])]
