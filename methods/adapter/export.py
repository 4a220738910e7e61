"""A committed adapter version as a PEFT adapter folder (adapter_config.json + adapter_model.safetensors), the
format PeftModel.from_pretrained, vLLM's LoRA loading and other engines read. Routed knowledge exports as an
adapter per subject (methods/routed/export.py); memory knowledge needs this server's own layers (a memory beside
a decoder layer), so versions holding it, or a mix of methods, do not export."""
from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file

from core import state
from core.registry import NotExportable
from core.versions import VersionStore
from methods.adapter import layer as adapter

WEIGHTS_FILE = "adapter_model.safetensors"  # PEFT's name; the keys are already PEFT's


def export_adapter(versions: VersionStore, version: int, out: Path, base_model: str) -> Path:
    """Write `version`'s adapter into `out`; `base_model` is what the adapter applies to (a path or hub id)."""
    held = state.resolve(versions, version).states
    if others := sorted(set(held) - {"adapter"}):
        raise NotExportable(f"version {version} holds {', '.join(others)} knowledge: only versions taught with the "
                            "adapter method alone, or with the routed method alone, export")
    if "adapter" not in held:
        raise NotExportable(f"version {version} has learned nothing: serve the base model itself")
    lora: adapter.LoraState = held["adapter"]
    config = adapter.config_from_dict(lora.config)
    config.base_model_name_or_path = base_model
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(out))
    save_file({k: v.contiguous() for k, v in lora.tensors.items()}, str(out / WEIGHTS_FILE),
              metadata={"format": "pt", "ckl_version": str(version)})
    return out
