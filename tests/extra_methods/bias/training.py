from typing import Any

import torch
from torch import nn

from core.training import UpdateMethod
from tests.extra_methods.bias.layer import add_bias


class BiasMethod(UpdateMethod):
    name = "bias"

    def __init__(self, model, tokenizer, settings) -> None:
        super().__init__(model, tokenizer, settings)
        self._model, self.bias = model, add_bias(model)

    @property
    def model(self) -> nn.Module:
        return self._model

    def parameters(self) -> list[nn.Parameter]:
        return [self.bias]

    def load(self, state: torch.Tensor | None) -> None:
        self.bias.data.copy_(state if state is not None else torch.zeros_like(self.bias))

    def delta(self) -> dict[str, torch.Tensor]:
        return {"bias": self.bias.detach().clone()}

    def manifest_fields(self) -> dict[str, Any]:
        return {"hyperparameters": {"learning_rate": self.config.learning_rate}}
