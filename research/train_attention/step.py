"""phi's meta step: one optimizer step of the head on a batch of (evidence, task) pairs.

Per step, over a batch of pairs: weigh the document with phi and move phi towards what it learns
(`--variant`, research/train_attention/meta.py): `answer`, the task's answer tokens in the document;
`first-order`, each token's usefulness; `exact`, the meta-gradient of the task's loss after one SGD
step of a fresh adapter (LoRA on the frozen base model) on the weighted loss. Shared by `ckl
train-attention` (research/train_attention/training.py) and `ckl bench phi-heads`.
"""
from __future__ import annotations

import random

import torch

from research.train_attention import meta
from research.train_attention.caches import MetaExample
from research.train_attention.config import TrainConfig
from workers.train_attention import phi


def batch_at(step: int, n_examples: int, train_config: TrainConfig) -> list[int]:
    """The examples of phi step `step`: passes over a seeded shuffle, the order a function of the pass alone
    (so a resumed run and any other loop over the same examples take the same batches)."""
    per_pass = max(1, n_examples // train_config.batch)
    order = random.Random(train_config.seed + step // per_pass).sample(range(n_examples), n_examples)
    i = (step % per_pass) * train_config.batch
    return order[i : i + train_config.batch]


def new_head(config: phi.PhiConfig, train_config: TrainConfig) -> tuple[phi.PhiHead, torch.optim.Optimizer]:
    """phi's initial head (seeded) and its optimizer."""
    torch.manual_seed(train_config.seed)
    head = phi.make_head(config)
    return head, torch.optim.AdamW(head.parameters(), lr=train_config.lr)


def phi_step(head: phi.PhiHead, optimizer: torch.optim.Optimizer, model: torch.nn.Module,
             examples: list[MetaExample], step: int, train_config: TrainConfig,
             alignments: dict[str, torch.Tensor] | None) -> float:
    """One optimizer step of phi on step `step`'s batch; returns the batch's mean loss."""
    batch = [examples[j] for j in batch_at(step, len(examples), train_config)]
    optimizer.zero_grad(set_to_none=True)
    loss = meta_step(head, model, batch, train_config, alignments)
    optimizer.step()
    return loss


def meta_step(head: phi.PhiHead, model: torch.nn.Module, batch: list[MetaExample], train_config: TrainConfig,
              alignments: dict[str, torch.Tensor] | None) -> float:
    """Accumulate phi's gradient over the batch (each pair from a fresh adapter); returns the batch's mean loss.
    `alignments`: the first-order variant's targets, per uuid (the other variants need none)."""
    total = 0.0
    theta = meta.adapter_params(model) if train_config.variant == "exact" else {}
    for ex in batch:
        weights = head(ex.features)
        if train_config.variant == "answer":
            loss = meta.answer_objective(weights, ex.object_mask)
        elif train_config.variant == "exact":
            loss = meta.exact_outer_loss(model, theta, ex.pair, weights, train_config.inner_lr)
        else:
            loss = meta.first_order_objective(weights, alignments[ex.uuid])
        (loss * ex.weight / len(batch)).backward()
        total += loss.item() * ex.weight / len(batch)
    return total
