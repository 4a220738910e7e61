"""The adapter method: a LoRA adapter on attention and MLP projections, trained with a token-weighted loss.

Each update continues the committed adapter, so knowledge accumulates across versions. The LM head
runs only at positions with non-zero weight. The optimizer starts fresh for each document: its
moments from an earlier document say nothing about this one.
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
                "hyperparameters": {"optimizer": "AdamW", "learning_rate": s.learning_rate, "max_steps": s.max_steps,
                                    "check_every": s.check_every, "lora_rank": s.lora_rank, "lora_alpha": s.lora_alpha}}

    def train(self, examples: list[Example], budget: int, probes_pass: Callable[[], bool],
              progress: Progress) -> TrainReport:
        started = time.perf_counter()
        optimizer = torch.optim.AdamW(self._params, lr=self.settings.learning_rate, weight_decay=0.0)
        pad_id = self.tokenizer.pad_token_id or 0
        report = TrainReport(steps=0, stopped_early=False)
        for step in range(budget):
            batch = [examples[(step * BATCH_WINDOWS + i) % len(examples)] for i in range(min(BATCH_WINDOWS, len(examples)))]
            ids, mask = pad_batch([e.input_ids for e in batch], pad_id, self.device)
            rows, cols, targets, weights = weighted_positions(batch, self.device)
            with torch.enable_grad():
                logits = logits_at(self.peft, ids, mask, rows, cols)
                loss = weighted_nll(logits, targets, weights, rows, len(batch))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            report.steps = step + 1
            report.losses.append(round(float(loss.detach()), 4))
            progress(step + 1, budget)
            if (step + 1) % self.settings.check_every == 0 and probes_pass():
                report.stopped_early = True
                break
        report.seconds = time.perf_counter() - started
        return report
