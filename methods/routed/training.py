"""The routed method's training side: each document gets its own low-rank delta, trained while the framework routes
the document's subject to it (core/routing/), so teaching a fact cannot move unrelated answers and the gate scores
again only the probes routed to the new document. The tokens trained are the document's weighting's (Train-Attention's
weights on a floor, so every token is learned and phi's most), in the document's windows, its sentences on their own
and its probes, so the fact is found from more than one context.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from core.served import LoadDelta
from core.settings import Settings
from core.training import UpdateMethod
from methods.routed import storage
from methods.routed.layer import RoutedLora
from methods.routed.serving import Deltas, empty_delta, ensure_loaded, lora_shape


class RoutedMethod(UpdateMethod):
    name = "routed"
    sentence_contexts = True
    probe_contexts = True

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: Settings) -> None:
        super().__init__(model, tokenizer, settings)
        self._model = model
        self.lora = RoutedLora(model, lora_shape(self.config), self.config.resident)
        self.state = Deltas()
        self.extra_steps = self.config.extra_steps
        self.weight_floor = self.config.weight_floor
        self.question_contexts = self.config.question_examples
        self.document_id: str | None = None  # the document being trained
        self.stored: dict[str, torch.Tensor] = {}  # its tensors as they will be written (after training)

    @property
    def model(self) -> nn.Module:
        return self._model

    def parameters(self) -> list[nn.Parameter]:
        return list(self.lora.documents[self.document_id].values()) if self.document_id else []

    def load(self, state: Deltas | None) -> None:
        self.state = state or Deltas()
        for document_id in {*self.lora.documents, *self.lora.sources} - set(self.state.stored_in):
            self.lora.forget(document_id)  # an uncommitted candidate included
        ensure_loaded(self.lora, self.state)
        self._settle()

    def _settle(self) -> None:
        """No candidate: the loaded state is what a version holds."""
        self.document_id = None
        self.lora.activate(None)
        self.lora.trained = None

    def begin(self, document_id: str, text: str, probes: list[tuple[str, str]]) -> None:
        # Seeded by the text, not the random id: the same document trains the same delta on every run.
        self.document_id = document_id
        self.lora.documents[document_id] = self.lora.fresh(seed=zlib.crc32(text.encode()))
        self.lora.trained = document_id

    def train(self, *args: Any, **kwargs: Any):
        report = super().train(*args, **kwargs)
        # Stored now, and the delta set to what the stored tensors hold: the gate checks exactly what is served.
        own = self.lora.documents[self.document_id]
        self.stored = storage.pack(own, self.config.storage)
        with torch.no_grad():
            for name, value in storage.unpack(self.stored).items():
                own[name].copy_(value)
        return report

    def delta(self) -> dict[str, torch.Tensor]:
        return empty_delta() if self.document_id is None else self.stored

    def manifest_fields(self) -> dict[str, Any]:
        c = self.config
        return {"routing": {"threshold": self.settings.routing_threshold, "rank": c.rank, "alpha": c.alpha,
                            "targets": list(c.targets), "layers": c.layers, "storage": c.storage},
                "hyperparameters": {"optimizer": c.optimizer, "learning_rate": c.learning_rate,
                                    "max_steps": self.settings.training.max_steps, "extra_steps": c.extra_steps}}

    def committed(self, version: int) -> None:
        if self.document_id is not None:
            self.state = Deltas({**self.state.stored_in, self.document_id: version}, self.state.load_delta)
            self.lora.sources[self.document_id] = version
            if self.state.load_delta is not None:  # read again from the version if it leaves memory
                self.lora.register(self.document_id, version, partial(self.state.load_delta, version))
            for tensor in self.lora.documents[self.document_id].values():
                tensor.requires_grad_(False)  # from now on stacked with the others, never trained again
        self._settle()

    def activate(self, route: Hashable | None) -> None:
        self.lora.activate(route)

    per_row = True

    def activate_rows(self, routes: list[Hashable | None]) -> None:
        self.lora.activate_rows(routes, restack=True)  # the candidate's tensors change between two scorings

    def remove(self, removed: dict[str, Any], later: list[dict[str, Any]], load_delta: LoadDelta,
               earlier: Deltas | None, relearn: Callable[[], None]) -> bool:
        """Exact: the document's delta is dropped (the framework routes no prompt to it any more), and the documents it
        retired are read again where their versions store them (they are routed to again); nothing to relearn."""
        target = removed["documents"][0]
        back = {d: v for d, v in (earlier.stored_in if earlier else {}).items() if d in removed.get("retires", [])}
        kept = {d: v for d, v in self.state.stored_in.items() if d != target}
        self.state = Deltas({**kept, **back}, self.state.load_delta or load_delta)
        self.lora.forget(target)
        ensure_loaded(self.lora, self.state)
        return False
