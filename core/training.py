"""The interface every update method implements, and the training loop they share.

A method owns a trainable knowledge state on top of the frozen base model. The learning job:
`build` once -> `load(parent state)` -> `train(examples, ...)` -> score the model in the gate -> commit
`delta()`. The state `load` takes is what the method's serving side composes from a lineage
(core.served).
The loop is the same for every method: a token-weighted loss with the LM head only at weighted
positions, clipped gradients, and a stop as soon as the document's probes pass.
"""
from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from core.batching import by_length, most_at_risk, step_batches
from core.heap import give_back
from core.scoring import decoder_and_head, next_token_nll, pad_batch
from core.served import LoadDelta
from core.settings import Settings
from core.vocabulary import step_vocabulary

Progress = Callable[[int, int], None]


@dataclass
class Example:
    """One training window: token ids and the weight of each predicted token (position 0 is never predicted)."""
    input_ids: list[int]
    weights: list[float]


@dataclass
class TrainReport:
    steps: int
    stopped_early: bool
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    timed_out: bool = False
    stopped: bool = False  # asked to stop (`stop`): its owner withdrew the document
    rested_s: float = 0.0  # of `seconds`, the rests that let serving decode (workers/yielding.py)


def weighted_positions(examples: list[Example], device: torch.device):
    """(row, predicting position, target id, weight) for every token with weight > 0."""
    rows, cols, targets, weights = [], [], [], []
    for row, ex in enumerate(examples):
        for pos, w in enumerate(ex.weights):
            if w > 0 and pos > 0:
                rows.append(row)
                cols.append(pos - 1)
                targets.append(ex.input_ids[pos])
                weights.append(w)
    as_tensor = lambda xs, dtype: torch.tensor(xs, dtype=dtype, device=device)  # noqa: E731
    return as_tensor(rows, torch.long), as_tensor(cols, torch.long), as_tensor(targets, torch.long), \
        as_tensor(weights, torch.float32)


def sequence_nll(nll: torch.Tensor, weights: torch.Tensor, rows: torch.Tensor,
                 n_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sequence's sum_i w_i * nll_i / sum_i w_i (only weighted positions are passed in), and which sequences
    have any weight (the others' value is 0)."""
    num = torch.zeros(n_rows, device=nll.device).index_add(0, rows, weights * nll)
    den = torch.zeros(n_rows, device=nll.device).index_add(0, rows, weights)
    used = den > 0
    return torch.where(used, num / den.clamp_min(torch.finfo(den.dtype).tiny), 0.0), used


def make_optimizer(name: str, params: list[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    return torch.optim.SGD(params, lr=lr)


class UpdateMethod(ABC):
    name: str
    sentence_contexts = False  # also train each later sentence of a document on its own (workers/contexts.py)
    probe_contexts = False  # also train on the document's probes (prompt -> answer, the answer's tokens weighted)
    question_contexts = False  # and on each probe asked as a question (workers/questions.py: as_question)
    extra_steps = 0  # steps trained after the probes first pass
    weight_floor = 0.0  # phi's weights: 0 cuts the small ones (CKL_TRAINING_WEIGHT_THRESHOLD); > 0 floors them
    # Whether the method's layer adds to the output layer's product (a forward hook on it): its steps then take
    # their softmax over every word, since a softmax over a few reads only the weight's rows (step_vocabulary).
    changes_output_layer = False

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: Settings) -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.config = self.own_settings(settings)
        self.device = next(model.parameters()).device
        self.vocabulary: torch.Tensor | None = None  # while a document trains: its steps' words (step_vocabulary)

    def own_settings(self, settings: Settings) -> Any:
        """The method's own settings (CKL_<NAME>_*): a registered method's come through the registry."""
        return settings.method_config(self.name)

    @classmethod
    def build(cls, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: Settings) -> UpdateMethod:
        """The method on the learner's model; a method with a version-0 state of its own prepares it here."""
        return cls(model, tokenizer, settings)

    @property
    @abstractmethod
    def model(self) -> nn.Module:
        """The model with the method's current knowledge state: what the gate scores."""

    @abstractmethod
    def parameters(self) -> list[nn.Parameter]:
        """What training updates."""

    @abstractmethod
    def load(self, state: Any) -> None:
        """Set the knowledge state to a committed one (None: nothing learned by this method)."""

    @abstractmethod
    def delta(self) -> dict[str, torch.Tensor]:
        """The trained state as tensors for the version store."""

    @abstractmethod
    def manifest_fields(self) -> dict[str, Any]:
        """What a server needs to install the delta, and the hyperparameters, for the manifest."""

    def begin(self, document_id: str, text: str, probes: list[tuple[str, str]]) -> None:
        """Before training a document (with its probes, given or made): a per-document method sets up the document's
        own fresh state here (the framework has its routing key: core/routing/candidate.py)."""

    def committed(self, version: int) -> None:
        """The trained state was committed as `version` and stays loaded for the next document."""

    def activate(self, route: Hashable | None) -> None:
        """Use `route` for the next forward passes (scoring a group of probes with the same route): for a per-document
        method, the documents of its own the framework routed them to; None for a whole-version one."""

    per_row = False  # whether rows of one forward pass may each have their own route (activate_rows)

    def activate_rows(self, routes: list[Hashable | None]) -> None:
        """Row i of the next forward passes uses `routes[i]` (scoring probes with different routes in one pass).
        Only for a method with `per_row`."""
        raise NotImplementedError(f"{type(self).__name__} routes the whole batch")

    def remove(self, removed: dict[str, Any], later: list[dict[str, Any]], load_delta: LoadDelta, earlier: Any,
               relearn: Callable[[], None]) -> bool:
        """Take one committed version's contribution out of the loaded state, for a removable method.
        `removed`: that version's manifest; `later`: the manifests of this method's versions after it;
        `earlier`: the state before it; `relearn()` trains those later documents again on the loaded state, in
        order. Returns whether it had to relearn."""
        raise NotImplementedError(f"{self.name} cannot take one document out")

    def restrict_gradients(self, batch: list[Example]) -> None:
        """Between backward and the step: a method that trains only part of its parameters masks here."""

    def optimizer(self, learning_rate: float | None = None) -> torch.optim.Optimizer:
        return make_optimizer(self.config.optimizer, self.parameters(), learning_rate or self.config.learning_rate)

    def losses(self, batch: list[Example]) -> tuple[torch.Tensor, torch.Tensor]:
        """Each example's weighted loss, and which examples have any weight (sequence_nll). Examples of very
        different lengths (a document's window beside its short probes) run as separate passes (`by_length`): one
        padded batch would pay the longest one's length for every row."""
        groups = by_length([len(e.input_ids) for e in batch])
        if len(groups) == 1:
            return self._padded_losses(batch)
        parts = [self._padded_losses([batch[i] for i in group]) for group in groups]
        order = torch.tensor([i for group in groups for i in group], device=self.device)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(len(order), device=self.device)
        return torch.cat([p for p, _ in parts])[inverse], torch.cat([u for _, u in parts])[inverse]

    def _encoded(self, batch: list[Example]) -> tuple[torch.Tensor, ...]:
        """The batch padded (ids, mask), and its weighted positions (rows, cols, targets, weights)."""
        ids, mask = pad_batch([e.input_ids for e in batch], self.tokenizer.pad_token_id or 0, self.device)
        return (ids, mask, *weighted_positions(batch, self.device))

    def _padded_losses(self, batch: list[Example]) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask, rows, cols, targets, weights = self._encoded(batch)
        nll = next_token_nll(self.model, ids, mask, rows, cols, targets, vocabulary=self.vocabulary)
        return sequence_nll(nll, weights, rows, len(batch))

    def step_vocabulary(self, examples: list[Example], batch_size: int) -> torch.Tensor | None:
        """The words the steps on `examples` take their softmax over (core/vocabulary.py); None: every word, also
        where the output layer computes more than its weight's rows (an adapter wrapped around it, or the method's
        own layer adding to it: `changes_output_layer`)."""
        config, head = self.settings.training, decoder_and_head(self.model)[1]
        if not config.vocabulary_top_k or not isinstance(head, nn.Linear) or self.changes_output_layer:
            return None
        ordered = sorted({id(e): e for e in examples}.values(), key=lambda e: len(e.input_ids))
        passes = (self._encoded(ordered[i:i + batch_size])[:5] for i in range(0, len(ordered), batch_size))
        return step_vocabulary(self.model, passes, config.vocabulary_top_k, config.vocabulary_neighbours)

    @torch.no_grad()
    def measured_losses(self, examples: list[Example], batch_size: int) -> list[float]:
        """Each example's loss under the current state, nothing trained."""
        return [value for i in range(0, len(examples), batch_size)
                for value in self.losses(examples[i:i + batch_size])[0].tolist()]

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision a training step's passes run in (CKL_TRAINING_AUTOCAST)."""
        if self.settings.training.autocast == "off":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def loss(self, batch: list[Example]) -> torch.Tensor:
        per_example, used = self.losses(batch)
        return per_example[used].mean()

    def _step(self, own: list[Example], replay: list[Example], replay_losses: list[float],
              optimizer: torch.optim.Optimizer, params: list[nn.Parameter]) -> float:
        """One optimizer step on `own` and the replayed rows most at risk (their losses updated as trained); the
        step's loss, rounded."""
        replayed = most_at_risk(replay_losses, self.settings.training.replay_rows)
        batch = own + [replay[i] for i in replayed]
        with torch.enable_grad(), self.autocast():
            per_example, used = self.losses(batch)
            loss = per_example[used].mean()
            for i, value in zip(replayed, per_example[len(own):].tolist(), strict=True):
                replay_losses[i] = value
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.restrict_gradients(batch)
            if self.settings.training.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, self.settings.training.max_grad_norm)
            optimizer.step()
        value = round(float(loss.detach()), 4)
        del per_example, loss
        give_back()  # this step's transients: kept in the C heap, RSS would climb by them step after step
        return value

    def _trainable(self) -> list[nn.Parameter]:
        """`parameters()`, each asking for its gradient: wrapping the model for another method (PEFT) may have frozen
        them."""
        params = self.parameters()
        for p in params:
            p.requires_grad_(True)
        return params

    @contextlib.contextmanager
    def restricted_to(self, vocabulary: torch.Tensor | None) -> Iterator[None]:
        """Steps take their softmax over `vocabulary` (`step_vocabulary`) inside, over every word after, even where
        a step raised."""
        self.vocabulary = vocabulary
        try:
            yield
        finally:
            self.vocabulary = None

    def train(self, examples: list[Example], budget: int, probes_pass: Callable[[], bool] = lambda: False,
              progress: Progress = lambda step, steps: None, optimizer: torch.optim.Optimizer | None = None,
              batch_size: int = 8, replay: list[Example] = (), pinned: list[Example] = (),
              deadline: float | None = None, rest_after_step: Callable[[float], float] = lambda worked_s: 0.0,
              compute: Callable[[Callable[[], Any]], Any] = lambda work: work(),
              stop: Callable[[], bool] = lambda: False) -> TrainReport:
        """Train from the loaded state for `budget` steps, or until `probes_pass()` (checked every few steps)
        and then `extra_steps` more, after which the probes must still pass (else training goes on).

        `replay`: what must hold beside the new knowledge (earlier facts). Each step trains all of `examples` (up
        to `batch_size`) and `replay_rows` of the replayed ones, those with the highest loss (measured without
        training every `check_every` steps, and as trained in between): a step costs the same however much is
        replayed, and it goes where the new delta pulls earlier facts away.

        `pinned` (a document's probe examples) are in every step beside the others; the others come round in
        batches of at most `max_step_tokens` tokens. Training stops at `deadline` (time.perf_counter()), wherever
        it is (`report.timed_out`). `rest_after_step(seconds the step took)` runs between steps and returns the
        seconds it rested (yielding the machine to serving); the deadline moves by them. `compute(work)` runs each
        step's work, the probe checks and the replay's losses (where: workers/yielding.py, Rests.compute).
        `stop()`, asked after each step's progress, ends training there (`report.stopped`).

        A document gets a fresh optimizer (moments from another document say nothing about this one);
        a caller that trains over several calls (the benchmark's epochs) passes its own.
        """
        started = step_started = time.perf_counter()
        optimizer, params = optimizer or self.optimizer(), self._trainable()
        report = TrainReport(steps=0, stopped_early=False)
        passed_at: int | None = None
        steps = budget + self.extra_steps
        replay_losses: list[float] = []
        config = self.settings.training
        with self.restricted_to(compute(lambda: self.step_vocabulary([*examples, *pinned, *replay], batch_size))):
            for step, own in enumerate(step_batches(examples, pinned, batch_size, steps, config.max_step_tokens)):
                if step:  # after the last step's work, its probe check included: a rest, outside the deadline
                    rested = rest_after_step(time.perf_counter() - step_started)
                    report.rested_s += rested
                    deadline = deadline + rested if deadline is not None else None
                    step_started = time.perf_counter()
                if deadline is not None and time.perf_counter() > deadline:
                    report.timed_out = True
                    break
                if replay and step % config.check_every == 0:  # what the delta pulls away changes as it grows
                    replay_losses = compute(lambda: self.measured_losses(replay, batch_size))
                report.steps = step + 1
                report.losses.append(compute(lambda: self._step(own, replay, replay_losses, optimizer, params)))
                progress(step + 1, steps)
                if stop():
                    report.stopped = True
                    break
                if passed_at is None and (step + 1) % config.check_every == 0 and compute(probes_pass):
                    passed_at = step + 1
                elif passed_at is not None and step + 1 >= passed_at + self.extra_steps:
                    if compute(probes_pass):
                        break
                    passed_at = None  # the extra steps undid what they were to strengthen: train on, within the budget
                if (passed_at is not None and not self.extra_steps) or (passed_at is None and step + 1 >= budget):
                    break  # passed and no extra steps, or out of budget (extra steps: for a document that passed)
            report.stopped_early = passed_at is not None
        report.seconds = time.perf_counter() - started
        return report
