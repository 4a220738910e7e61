"""The adapter method: a LoRA adapter on attention and MLP projections, trained with a token-weighted loss.

Each update continues the committed adapter, so knowledge accumulates across versions. The LM head
runs only at positions with non-zero weight. The optimizer starts fresh for each document: its
moments from an earlier document say nothing about this one.

Defaults (measured by teaching the invented facts of bench/facts.jsonl one by one; see README): AdamW at 5e-5 with
a check of the document's probes every 2 steps moves the model least; AdamW at 3e-4 learned each fact
in 4-6 steps but cost 3-4 NF points per fact, and plain SGD (clipped) cost more than AdamW.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from service.knowledge import adapter
from service.knowledge.scoring import logits_at, pad_batch, weighted_nll
from service.settings import Settings
from workers.methods.base import Example, Progress, TrainReport, UpdateMethod

ADAPTER = "learning"
BATCH_WINDOWS = 8
MAX_GRAD_NORM = 1.0


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


def make_optimizer(name: str, params: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    return torch.optim.SGD(params, lr=lr)


def cycle(items: list[Example], step: int, size: int) -> list[Example]:
    """The step-th batch of `size` items, wrapping around."""
    return [items[(step * size + i) % len(items)] for i in range(min(size, len(items)))]


class AdapterMethod(UpdateMethod):
    name = "adapter"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: Settings) -> None:
        super().__init__(model, tokenizer, settings)
        self.config = adapter.lora_config(settings.lora_rank, settings.lora_alpha)
        torch.manual_seed(0)  # the A matrices of version 0 are the same in every worker
        self.peft = adapter.attach(model, self.config, ADAPTER)
        self._initial = adapter.read_state(self.peft, ADAPTER)
        self._params = [p for n, p in self.peft.named_parameters() if "lora_" in n]
        self.device = next(model.parameters()).device

    @property
    def model(self) -> nn.Module:
        return self.peft

    def load(self, delta: dict[str, torch.Tensor] | None) -> None:
        adapter.write_state(self.peft, ADAPTER, delta if delta is not None else self._initial)

    def delta(self) -> dict[str, torch.Tensor]:
        return adapter.read_state(self.peft, ADAPTER)

    def manifest_fields(self) -> dict[str, Any]:
        s = self.settings
        return {"lora": adapter.config_to_dict(self.config),
                "hyperparameters": {"optimizer": s.optimizer, "learning_rate": s.learning_rate, "max_steps": s.max_steps,
                                    "check_every": s.check_every, "lora_rank": s.lora_rank, "lora_alpha": s.lora_alpha}}

    def _loss(self, batch: list[Example]) -> torch.Tensor:
        ids, mask = pad_batch([e.input_ids for e in batch], self.tokenizer.pad_token_id or 0, self.device)
        rows, cols, targets, weights = weighted_positions(batch, self.device)
        return weighted_nll(logits_at(self.peft, ids, mask, rows, cols), targets, weights, rows, len(batch))

    def train(self, examples: list[Example], budget: int, probes_pass: Callable[[], bool],
              progress: Progress) -> TrainReport:
        started = time.perf_counter()
        optimizer = make_optimizer(self.settings.optimizer, self._params, self.settings.learning_rate)
        report = TrainReport(steps=0, stopped_early=False)
        for step in range(budget):
            with torch.enable_grad():
                loss = self._loss(cycle(examples, step, BATCH_WINDOWS))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                # A new fact starts at a loss near 15 nats: unclipped gradients blow plain SGD up.
                torch.nn.utils.clip_grad_norm_(self._params, MAX_GRAD_NORM)
                optimizer.step()
            report.steps = step + 1
            report.losses.append(round(float(loss.detach()), 4))
            progress(step + 1, budget)
            if (step + 1) % self.settings.check_every == 0 and probes_pass():
                report.stopped_early = True
                break
        report.seconds = time.perf_counter() - started
        return report
