from typing import Any

import torch
from torch import nn

from core.served import LoadDelta, ServedMethod
from tests.extra_methods.bias.layer import add_bias


class BiasServed(ServedMethod):
    name = "bias"

    def __init__(self, model: nn.Module, settings) -> None:
        super().__init__(model, settings)
        self.bias = add_bias(model)
        self.per_version: dict[int, torch.Tensor] = {}

    @staticmethod
    def compose(manifests: list[dict[str, Any]], load_delta: LoadDelta) -> torch.Tensor:
        return load_delta(manifests[-1]["version"])["bias"]  # each version continues the last

    def add(self, version: int, state: torch.Tensor | None) -> None:
        self.per_version[version] = state if state is not None else torch.zeros_like(self.bias)

    def use(self, version: int, route: None = None) -> None:
        self.bias.data.copy_(self.per_version[version])

    def drop(self, version: int) -> None:
        del self.per_version[version]
