"""Rho-1, a baseline: before every epoch, train only on the tokens whose loss most exceeds the untouched model's."""
from __future__ import annotations

import torch
from torch import nn

from core.scoring import logits_at, pad_batch
from core.training import Example

KEEP = 0.6  # the share of each document's predicted tokens trained on


@torch.no_grad()
def token_nll(model: nn.Module, sequences: list[list[int]], pad_id: int, batch_size: int = 8) -> list[list[float]]:
    """NLL of every token given its prefix (position 0 gets 0.0: nothing predicts it)."""
    device = next(model.parameters()).device
    out: list[list[float]] = []
    for start in range(0, len(sequences), batch_size):
        batch = sequences[start : start + batch_size]
        ids, mask = pad_batch(batch, pad_id, device)
        rows = torch.tensor([r for r, seq in enumerate(batch) for _ in range(len(seq) - 1)], device=device)
        cols = torch.tensor([c for seq in batch for c in range(len(seq) - 1)], device=device)
        targets = torch.tensor([t for seq in batch for t in seq[1:]], device=device)
        nll = nn.functional.cross_entropy(logits_at(model, ids, mask, rows, cols).float(), targets, reduction="none")
        cursor = 0
        for seq in batch:
            out.append([0.0, *nll[cursor : cursor + len(seq) - 1].tolist()])
            cursor += len(seq) - 1
    return out


def excess_loss_top(current_nll: list[float], reference_nll: list[float], keep: float) -> list[float]:
    """Rho-1's selection: weight 1 on the `keep` share of predicted tokens whose loss most exceeds the
    untouched model's loss on them (tokens the training has not absorbed yet), 0 elsewhere.

    Position 0 is never predicted; its entries are ignored.
    """
    excess = [c - r for c, r in zip(current_nll[1:], reference_nll[1:])]
    n_keep = max(1, round(keep * len(excess)))
    ranked = sorted(range(len(excess)), key=lambda i: -excess[i])[:n_keep]
    weights = [0.0] * len(current_nll)
    for i in ranked:
        weights[i + 1] = 1.0
    return weights


def reweigh(model: nn.Module, pad_id: int, examples: list[Example], reference: list[list[float]]) -> list[Example]:
    """The examples with each document's weights chosen again against `reference` (the untouched model's NLL)."""
    current = token_nll(model, [e.input_ids for e in examples], pad_id)
    return [Example(e.input_ids, excess_loss_top(c, r, KEEP)) for e, c, r in zip(examples, current, reference)]
