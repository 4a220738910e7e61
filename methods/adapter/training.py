"""The adapter method: a LoRA adapter on attention and MLP projections, trained with a token-weighted loss.

Each update continues the committed adapter, so knowledge accumulates across versions.

The defaults (CKL_ADAPTER_OPTIMIZER, CKL_ADAPTER_LEARNING_RATE, CKL_TRAINING_CHECK_EVERY) are what forgot least while
teaching facts one by one (docs/decisions.md: Adapter updates: AdamW at 5e-5).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from core.settings import Settings
from core.training import UpdateMethod
from methods.adapter import layer as adapter
from methods.adapter.layer import LoraState

ADAPTER = "learning"


class AdapterMethod(UpdateMethod):
    name = "adapter"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: Settings) -> None:
        super().__init__(model, tokenizer, settings)
        self.lora = adapter.settings_config(self.config)
        torch.manual_seed(0)  # the A matrices of version 0 are the same in every worker
        self.peft = adapter.attach(model, self.lora, ADAPTER)
        self._initial = adapter.read_state(self.peft, ADAPTER)
        self._params = [p for n, p in self.peft.named_parameters() if "lora_" in n]

    @property
    def model(self) -> nn.Module:
        return self.peft

    def parameters(self) -> list[nn.Parameter]:
        return self._params

    def load(self, state: LoraState | None) -> None:
        adapter.write_state(self.peft, ADAPTER, state.tensors if state is not None else self._initial)

    def delta(self) -> dict[str, torch.Tensor]:
        return adapter.read_state(self.peft, ADAPTER)

    def manifest_fields(self) -> dict[str, Any]:
        s, c = self.settings.training, self.config
        return {"lora": adapter.config_to_dict(self.lora),
                "hyperparameters": {"optimizer": c.optimizer, "learning_rate": c.learning_rate,
                                    "max_steps": s.max_steps,
                                    "check_every": s.check_every, "lora_rank": c.rank, "lora_alpha": c.alpha}}
