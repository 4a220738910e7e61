from collections.abc import Hashable
from typing import Any

import torch
from torch import nn

from core.training import UpdateMethod
from tests.extra_methods.bias.layer import DocumentBias


class BiasMethod(UpdateMethod):
    name = "bias"
    changes_output_layer = True  # its bias is added by a hook on the output layer

    def __init__(self, model, tokenizer, settings) -> None:
        super().__init__(model, tokenizer, settings)
        self._model, self.layer = model, DocumentBias(model)
        self.document_id: str | None = None

    @property
    def model(self) -> nn.Module:
        return self._model

    def parameters(self) -> list[nn.Parameter]:
        return [self.layer.biases[self.document_id]] if self.document_id else []

    def load(self, state: dict | None) -> None:
        self.layer.biases, self.document_id = dict(state or {}), None

    def begin(self, document_id: str, text: str, probes: list[tuple[str, str]]) -> None:
        self.layer.biases[document_id] = nn.Parameter(torch.zeros(self.layer.size))
        self.document_id = document_id

    def activate(self, route: Hashable | None) -> None:
        self.layer.active = tuple(route or ())

    def delta(self) -> dict[str, torch.Tensor]:
        return {"bias": self.layer.biases[self.document_id].detach().clone()}

    def committed(self, version: int) -> None:
        self.layer.biases[self.document_id] = self.layer.biases[self.document_id].detach()
        self.document_id = None

    def manifest_fields(self) -> dict[str, Any]:
        return {"hyperparameters": {"learning_rate": self.config.learning_rate}}
