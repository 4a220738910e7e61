"""The routed method: each document gets its own low-rank delta, used only for prompts about it.

A prompt is routed by the document's key: the names of its subjects and its words that are rare in English
(routing.py);
any other prompt runs the base model unchanged, so teaching a fact cannot move unrelated answers, and the
gate needs to score again only the probes routed to the new document. The tokens trained are the
document's weighting's (Train-Attention's weights on a floor, so every token is learned and phi's most), in
the document's windows, its sentences on their own and its probes, so the fact is found from more than one
context.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable, Iterable
from functools import partial
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from core.namespaces import SHARED, reach, routed_for
from core.served import LoadDelta
from core.settings import Settings
from core.subjects import words
from core.training import UpdateMethod
from methods.routed import routing, storage
from methods.routed.layer import RoutedLora
from methods.routed.routing import KeyIndex
from methods.routed.serving import RoutedState, Taught, empty_delta, ensure_loaded, lora_shape


class RoutedMethod(UpdateMethod):
    name = "routed"
    sentence_contexts = True
    probe_contexts = True

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: Settings) -> None:
        super().__init__(model, tokenizer, settings)
        self._model = model
        self.lora = RoutedLora(model, lora_shape(self.config), self.config.resident)
        self.state = RoutedState()
        self.extra_steps = self.config.extra_steps
        self.weight_floor = self.config.weight_floor
        self.document_id: str | None = None  # the document being trained
        self.stored: dict[str, torch.Tensor] = {}  # its tensors as they will be written (after training)
        self.key: dict[str, float] = {}
        self.subjects: list[str] = []  # the candidate's subject terms: the documents it shares them with train beside it
        # The loaded version's documents: a prompt whose route differs from its route then is one the candidate
        # may answer differently (it names the new document, or one taken out or put back).
        self.before = self.state
        # The namespace of the document being learned, and those whose documents it is routed beside (None: all).
        self.namespace, self.reach = SHARED, None

    @property
    def model(self) -> nn.Module:
        return self._model

    def parameters(self) -> list[nn.Parameter]:
        return list(self.lora.documents[self.document_id].values()) if self.document_id else []

    def load(self, state: RoutedState | None) -> None:
        self.state = state or RoutedState()
        held = {taught.document_id for taught in self.state.documents}
        for document_id in {*self.lora.documents, *self.lora.sources} - held:  # an uncommitted candidate included
            self.lora.forget(document_id)
        ensure_loaded(self.lora, self.state)
        self._settle()

    def _settle(self) -> None:
        """No candidate: the loaded state is what a version holds."""
        self.document_id, self.key, self.subjects = None, {}, []
        self.lora.activate(None)
        self.before = self.state.snapshot()
        self.lora.trained = None

    def view(self, namespace: str) -> None:
        self.namespace, self.reach = namespace, reach(namespace)

    def begin(self, document_id: str, text: str, probes: list[tuple[str, str]]) -> None:
        self.document_id, self.key = document_id, routing.key_for(text, probes, self.config.threshold)
        self.subjects = routing.subject_terms(text, probes)
        # Seeded by the text, not the random id: the same document trains the same delta on every run.
        self.lora.documents[document_id] = self.lora.fresh(seed=zlib.crc32(text.encode()))
        self.lora.trained = document_id

    def refusal(self) -> str | None:
        return routing.unroutable(self.key, self.config.threshold)

    def train(self, *args: Any, **kwargs: Any):
        # Trained (and its probes checked) with its own delta on, beside those of the documents it shares a subject
        # with: a prompt about the subject will have them all on. Only its own delta is trained.
        self.lora.activate(routing.related(self.key, self._keys(self.reach), self.config.threshold, self.subjects)
                           or (self.document_id,))
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
        return {"key": self.key, "routing": {"threshold": c.threshold, "rank": c.rank, "alpha": c.alpha,
                                             "targets": list(c.targets), "layers": c.layers,
                                             "storage": c.storage},
                "hyperparameters": {"optimizer": c.optimizer, "learning_rate": c.learning_rate,
                                    "max_steps": self.settings.max_steps, "extra_steps": c.extra_steps}}

    def committed(self, version: int) -> None:
        if self.document_id is not None:
            taught = Taught(self.document_id, self.key, version, self.namespace)
            if any(t.document_id == self.document_id for t in self.state.documents):  # taught again: it moves last
                self.state.documents = [*(t for t in self.state.documents if t.document_id != self.document_id),
                                        taught]
            else:
                self.state.append(taught)
            self.lora.sources[self.document_id] = version
            if self.state.load_delta is not None:  # read again from the version if it leaves memory
                self.lora.register(self.document_id, version, partial(self.state.load_delta, version))
            for tensor in self.lora.documents[self.document_id].values():
                tensor.requires_grad_(False)  # from now on stacked with the others, never trained again
        self._settle()

    def _keys(self, namespaces: frozenset[str] | None) -> KeyIndex:
        """The keys of the documents in `namespaces` (None: all), the candidate's last."""
        candidate = [(self.document_id, self.key)] if self.document_id else []
        return self.state.keys(namespaces).plus(candidate)

    def unreachable(self, text: str, probes: list[tuple[str, str]]) -> list[str]:
        return routing.unreachable(text, probes, self.config.threshold)

    def route(self, prompt: str, namespace: str = SHARED) -> Hashable | None:
        return routing.route(prompt, self._keys(routed_for(namespace, self.reach)), self.config.threshold)

    def parent_route(self, prompt: str, namespace: str = SHARED) -> Hashable | None:
        return routing.route(prompt, self.before.keys(routed_for(namespace, self.reach)), self.config.threshold)

    def activate(self, route: Hashable | None) -> None:
        self.lora.activate(route)

    per_row = True

    def activate_rows(self, routes: list[Hashable | None]) -> None:
        self.lora.activate_rows(routes, restack=True)  # the candidate's tensors change between two scorings

    def affected(self, prompt: str, namespace: str = SHARED) -> bool:
        """Only prompts whose route the candidate changed: those that name the new document (beside the others of
        its subject), and those routed to a document taken out (removed, retired) or put back."""
        view = routed_for(namespace, self.reach)
        return routing.route(prompt, self.before.keys(view), self.config.threshold) != \
            routing.route(prompt, self._keys(view), self.config.threshold)

    def affected_among(self, asked: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """As `affected`, routing again only the prompts whose route may differ (routing.may_reroute): those that
        name a changed document, and those routed by an answer. The gate's cost follows what the candidate changed,
        not the number of facts learned. Each namespace's prompts with the keys they are routed with."""
        by_view: dict[frozenset[str], list[tuple[str, str]]] = {}
        for prompt, namespace in asked:
            by_view.setdefault(routed_for(namespace, self.reach), []).append((prompt, namespace))
        moved, threshold = set(), self.config.threshold
        for view, pairs in by_view.items():
            before, keys = self.before.keys(view), self._keys(view)
            watch = routing.watched(routing.changed(before, keys), [before, keys], threshold)
            moved |= {(prompt, namespace) for prompt, namespace in pairs
                      if routing.may_reroute(words(prompt), watch, keys, threshold)
                      and routing.route(prompt, before, threshold) != routing.route(prompt, keys, threshold)}
        return moved

    def retire(self, document_ids: list[str]) -> list[str]:
        """Exact: the documents leave the state, so no prompt routes to them any more."""
        retired = [t.document_id for t in self.state.documents if t.document_id in document_ids]
        self.state.documents = [t for t in self.state.documents if t.document_id not in retired]
        return retired

    def remove(self, removed: dict[str, Any], later: list[dict[str, Any]], load_delta: LoadDelta,
               earlier: Any, relearn: Callable[[], None]) -> bool:
        """Exact: the document leaves the state (and no prompt routes to it any more), and the documents it retired
        come back (what they taught is no longer replaced); nothing to relearn."""
        target = removed["documents"][0]
        back = [t for t in (earlier.documents if earlier else []) if t.document_id in removed.get("retires", [])]
        self.state.documents = [t for t in self.state.documents if t.document_id != target] + back
        self.lora.forget(target)
        ensure_loaded(self.lora, self.state)
        return False
