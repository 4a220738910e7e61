"""Full fine-tuning: every weight of the model is trained (a baseline for the LAMA-ckl benchmark).

Its delta is the whole model, so the server does not offer it for documents; it exists to show what
LoRA and token weighting save.
"""
from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import BaseModel
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from core.settings import Settings
from core.training import UpdateMethod


class FullSettings(BaseModel):
    optimizer: Literal["adamw", "sgd"] = "adamw"
    learning_rate: float = 1e-5


class FullMethod(UpdateMethod):
    name = "full"  # never registered: the benchmark builds it itself

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: Settings) -> None:
        super().__init__(model, tokenizer, settings)
        self._model = model
        self._initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self._params = list(model.parameters())
        model.requires_grad_(True)

    @property
    def model(self) -> nn.Module:
        return self._model

    def parameters(self) -> list[nn.Parameter]:
        return self._params

    def load(self, delta: dict[str, torch.Tensor] | None) -> None:
        self._model.load_state_dict(delta if delta is not None else self._initial)

    def delta(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self._model.state_dict().items()}

    def manifest_fields(self) -> dict[str, Any]:
        return {"hyperparameters": {"optimizer": self.config.optimizer, "learning_rate": self.config.learning_rate}}

    def own_settings(self, settings: Settings) -> FullSettings:
        return FullSettings()
