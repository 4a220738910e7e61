"""The LoRA adapter that carries learned knowledge, and moving its tensors in and out of a model.

Version 0 is an adapter whose B matrices are zero, so its output is the base model's exactly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from transformers import PreTrainedModel

from methods.adapter.config import AdapterSettings

# Attention and MLP projections of every decoder layer (Gemma, Llama, Qwen and Mistral name them so).
TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class LoraState:
    """An adapter version: its tensors (keyed without the adapter name) and its LoRA settings."""
    tensors: dict[str, torch.Tensor]
    config: dict[str, Any]  # config_to_dict's form


def lora_config(rank: int, alpha: float, targets: list[str] | None = None) -> LoraConfig:
    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, bias="none",
                      target_modules=list(targets or TARGET_MODULES), task_type="CAUSAL_LM")


def config_to_dict(config: LoraConfig) -> dict[str, Any]:
    return {"rank": config.r, "alpha": config.lora_alpha, "targets": sorted(config.target_modules)}


def config_from_dict(data: dict[str, Any]) -> LoraConfig:
    return lora_config(int(data["rank"]), float(data["alpha"]), data.get("targets"))


def settings_config(config: AdapterSettings) -> LoraConfig:
    """The LoRA configuration the method's settings ask for (CKL_ADAPTER_*)."""
    return lora_config(config.rank, config.alpha, config.targets)


def attach(model: PreTrainedModel, config: LoraConfig, name: str) -> PeftModel:
    peft = get_peft_model(model, config, adapter_name=name)
    peft.eval()
    return peft


def read_state(peft: PeftModel, name: str) -> dict[str, torch.Tensor]:
    """The adapter's tensors, detached on the CPU, keyed without the adapter name."""
    state = get_peft_model_state_dict(peft, adapter_name=name)
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in state.items()}


def write_state(peft: PeftModel, name: str, state: dict[str, torch.Tensor]) -> None:
    result = set_peft_model_state_dict(peft, state, adapter_name=name)
    missing = [k for k in result.missing_keys if "lora_" in k and f".{name}." in k]
    if missing:
        raise ValueError(f"adapter state lacks {len(missing)} tensors, e.g. {missing[0]}")
