"""A routed version as PEFT adapters, one per subject, for an engine that serves one LoRA adapter per request (vLLM,
LoRAX) behind a router that picks it by the prompt.

A subject's documents (those a prompt about it reaches together: routing.related) become one adapter: their
factors concatenated along the rank, each B scaled by its own document's alpha / rank (so lora_alpha = r and
PEFT's scaling is 1), with zero blocks where a document does not cover a projection. `routes.json` holds what a
router needs: the threshold, each document's key and namespace in teaching order, and each adapter's documents
(a subject's within one namespace). A prompt whose
route is exactly an adapter's documents is answered by that adapter; a route across two subjects has no single
adapter (this server adds both subjects' deltas).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from peft import LoraConfig
from safetensors.torch import save_file

from core import routing
from core.registry import NotExportable
from core.routing.table import Table, compose
from core.versions import VersionStore
from methods.routed.layer import layer_of
from methods.routed.storage import unpack

ROUTES_FILE = "routes.json"
WEIGHTS_FILE = "adapter_model.safetensors"  # PEFT's name


def subjects(state: Table, threshold: float) -> list[tuple[str, ...]]:
    """The documents grouped by subject within each namespace (a tenant's adapter holds none of another's
    documents), each group in teaching order, groups in the order of their first."""
    groups: dict[tuple[str, ...], None] = {}
    for namespace in dict.fromkeys(d.namespace for d in state.documents):
        keys = state.keys(frozenset({namespace}))
        for document_id, key in keys:
            groups.setdefault(routing.related(key, keys, threshold) or (document_id,), None)
    position = {d.document_id: i for i, d in enumerate(state.documents)}
    return sorted(groups, key=lambda group: position[group[0]])


def concatenated(deltas: list[tuple[dict[str, torch.Tensor], float]]) -> dict[str, torch.Tensor]:
    """PEFT's tensors for several documents' deltas (each with its scale) as one adapter of their summed rank."""
    modules = sorted({k.rsplit(".", 1)[0] for tensors, _ in deltas for k in tensors})
    ranks = [next(v.shape[0] for k, v in tensors.items() if k.endswith(".A")) for tensors, _ in deltas]
    out = {}
    for name in modules:
        held = next(t for t, _ in deltas if f"{name}.A" in t)
        fan_in, fan_out = held[f"{name}.A"].shape[1], held[f"{name}.B"].shape[0]
        a_parts, b_parts = [], []
        for (tensors, scale), rank in zip(deltas, ranks):
            a, b = tensors.get(f"{name}.A"), tensors.get(f"{name}.B")
            a_parts.append(a.float() if a is not None else torch.zeros(rank, fan_in))
            b_parts.append(b.float() * scale if b is not None else torch.zeros(fan_out, rank))
        out[f"base_model.model.{name}.lora_A.weight"] = torch.cat(a_parts).contiguous()
        out[f"base_model.model.{name}.lora_B.weight"] = torch.cat(b_parts, dim=1).contiguous()
    return out


def export_routed(versions: VersionStore, version: int, out: Path, base_model: str) -> Path:
    """Write `version`'s routed documents into `out`: an adapter folder per subject and routes.json."""
    manifests = versions.lineage(version)
    if {m["method"] for m in manifests} != {"routed"}:
        raise NotExportable(f"version {version} does not hold routed knowledge alone")
    state = compose(manifests)
    if not state.documents:
        raise NotExportable(f"version {version} holds no routed document: serve the base model itself")
    by_id = {m["documents"][0]: m for m in manifests if not m.get("removes")}
    threshold = by_id[state.documents[-1].document_id]["routing"]["threshold"]
    out.mkdir(parents=True, exist_ok=True)
    adapters = []
    for n, documents in enumerate(subjects(state, threshold)):
        deltas = []
        for document_id in documents:
            manifest = by_id[document_id]
            deltas.append((unpack(versions.load_delta(manifest["version"])),
                           manifest["routing"]["alpha"] / manifest["routing"]["rank"]))
        tensors = concatenated(deltas)
        modules = {k.removeprefix("base_model.model.").rsplit(".", 2)[0] for k in tensors}
        rank = next(iter(tensors.values())).shape[0]
        name = f"subject-{n}"
        config = LoraConfig(r=rank, lora_alpha=rank, target_modules=sorted({m.rsplit(".", 1)[-1] for m in modules}),
                            layers_to_transform=sorted({layer_of(m) for m in modules}), task_type="CAUSAL_LM",
                            base_model_name_or_path=base_model)
        config.save_pretrained(str(out / name))
        save_file(tensors, str(out / name / WEIGHTS_FILE), metadata={"format": "pt", "ckl_version": str(version)})
        adapters.append({"name": name, "documents": list(documents)})
    routes = {"version": version, "threshold": threshold,
              "keys": [[d.document_id, d.key, d.namespace] for d in state.documents],
              "adapters": adapters}
    (out / ROUTES_FILE).write_text(json.dumps(routes, indent=1))
    return out
