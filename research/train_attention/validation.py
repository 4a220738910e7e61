"""phi's validation during meta-training: where its weight falls, and what one weighted update teaches.

Recorded in the run's curve.json and the checkpoint's json; nothing stops early on it.
"""
from __future__ import annotations

import torch

from research.train_attention import meta
from research.train_attention.caches import MetaExample
from research.train_attention.config import TrainConfig
from workers.train_attention import phi


def object_weight_ratio(head: phi.PhiHead, examples: list[MetaExample]) -> float:
    """Mean weight on the object's tokens over mean weight on the other predicted tokens."""
    on, off = [], []
    with torch.no_grad():
        for ex in examples:
            w, m = head(ex.features)[1:], ex.object_mask[1:].bool()
            if m.any() and (~m).any():
                on.append(w[m].mean())
                off.append(w[~m].mean())
    return float(torch.stack(on).mean() / torch.stack(off).mean())


def validate(head: phi.PhiHead, model: torch.nn.Module, examples: list[MetaExample], train_config: TrainConfig,
             alignments: dict[str, torch.Tensor] | None) -> dict[str, float]:
    theta = meta.adapter_params(model)
    with torch.no_grad():
        weights = [head(ex.features) for ex in examples]
    out = {"object_weight_ratio": object_weight_ratio(head, examples),
           "mean_weight": float(torch.cat([w[1:] for w in weights]).mean()),
           "outer_loss": sum(meta.outer_loss_after_step(model, theta, ex.pair, w, train_config.inner_lr)
                             for ex, w in zip(examples[: train_config.val_outer], weights)) / train_config.val_outer}
    if alignments is not None:
        out["first_order_objective"] = float(sum(meta.first_order_objective(w, alignments[ex.uuid])
                                                 for ex, w in zip(examples, weights)) / len(examples))
    return {k: round(v, 4) for k, v in out.items()}


def reference_outer_losses(model: torch.nn.Module, examples: list[MetaExample], train_config: TrainConfig) -> dict:
    """The validation outer loss with uniform and with oracle weights: the floor and the target."""
    theta = meta.adapter_params(model)
    picked = examples[: train_config.val_outer]

    def mean(weights_of) -> float:
        return round(sum(meta.outer_loss_after_step(model, theta, ex.pair, weights_of(ex), train_config.inner_lr)
                         for ex in picked) / len(picked), 4)
    return {"uniform": mean(lambda ex: torch.ones(len(ex.pair.doc_ids))),
            "oracle": mean(lambda ex: ex.object_mask.clamp(min=1e-3))}
