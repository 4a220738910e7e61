"""A third method, added as the README's how-to says: a serving side, a training side, one registration.

The method is deliberately trivial: a bias on the next-token logits, one vector per version. It is
taught a fact through the API on the tiny model like any other method.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from service.knowledge import methods
from service.knowledge.methods.base import LoadDelta, MethodSpec, ServedMethod
from tests.api_app import tiny_client, tiny_settings, wait_final, wait_version
from workers.methods.base import UpdateMethod


def add_bias(model: nn.Module) -> nn.Parameter:
    """A zero bias added to the LM head's output (so version 0 is the base model exactly)."""
    head = model.get_output_embeddings()
    bias = nn.Parameter(torch.zeros(head.out_features))
    head.register_forward_hook(lambda _m, _args, out: out + bias)
    return bias


class BiasServed(ServedMethod):  # file one: the serving side
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


class BiasMethod(UpdateMethod):  # file two: the training side
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
        return {"hyperparameters": {"learning_rate": self.settings.learning_rate}}


@pytest.fixture
def bias_method():
    methods.register(MethodSpec("bias", BiasServed, BiasMethod, "bias.safetensors"))  # the one registration
    yield
    methods.unregister("bias")


def test_a_registered_method_learns_a_fact_through_the_api(bias_method, tmp_path):
    prompt = "the capital of veltoria is"
    with tiny_client(tiny_settings(tmp_path, learning_rate=0.5)) as client:
        assert client.post("/generate", json={"prompt": prompt, "max_new_tokens": 1}).json()["text"] != " marnhold"
        accepted = client.post("/documents", json={"text": "the capital of veltoria is marnhold", "method": "bias",
                                                   "probes": [{"prompt": prompt, "answer": "marnhold"}]}).json()
        record = wait_final(client, accepted["document_id"])
        assert record["status"] == "committed", record
        assert wait_version(client, record["version"], prompt)["text"].strip() == "marnhold"
        manifest = client.learner.versions.manifest(record["version"])
        assert manifest["method"] == "bias" and manifest["delta_file"] == "bias.safetensors"
        assert client.delete(f"/documents/{record['document_id']}").status_code == 409  # not registered removable
        assert client.post("/versions/0/activate", json={}).status_code == 200
        assert wait_version(client, 0, prompt)["text"].strip() != "marnhold"
