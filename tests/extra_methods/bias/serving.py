from collections.abc import Hashable
from typing import Any

from torch import nn

from core.routing.table import compose
from core.served import OFF, LoadDelta, ServedMethod
from tests.extra_methods.bias.layer import DocumentBias


class BiasServed(ServedMethod):
    name = "bias"

    def __init__(self, model: nn.Module, settings) -> None:
        super().__init__(model, settings)
        self.layer = DocumentBias(model)
        self.per_version: dict[int, dict] = {}

    @staticmethod
    def compose(manifests: list[dict[str, Any]], load_delta: LoadDelta) -> dict:
        """Each document the version holds, with its bias."""
        return {t.document_id: load_delta(t.version)["bias"] for t in compose(manifests).documents}

    def add(self, version: int, state: dict | None) -> None:
        self.per_version[version] = state or {}

    def use(self, version: int, route: Hashable | None = None) -> None:
        self.layer.biases = self.per_version[version]
        self.layer.active = () if route in (None, OFF) else tuple(route)

    def drop(self, version: int) -> None:
        del self.per_version[version]
