"""The meta-gradient that trains phi: how a document's token weights change what one update teaches.

The inner update is one SGD step of the adapter (the LoRA tensors theta) on the token-weighted loss
of the document; the outer loss is the updated model's NLL on the answer tokens of the document's
task. Two ways to get d(outer)/d(weights):

- exact: differentiate through the inner step (`torch.func.functional_call` over the adapter
  tensors, `torch.autograd.grad(..., create_graph=True)`): one forward, a double backward.
- first order: a token's usefulness is how much its loss falls when the adapter takes one step on
  the task, `a_t = l_t(theta) - l_t(theta - lr * grad L_task(theta))`, which to first order is
  `lr * <grad l_t, grad L_task>`, the alignment of the two gradients. phi learns it as a target:
  `y_t = clamp(a_t / max_s a_s, 0, 1)` (1 for the most useful token, 0 for tokens whose training
  works against the task), with a binary cross-entropy. The alignments do not depend on phi, so they
  are computed once per pair (a backward on the short task and two forwards on the document).
  Why a target and not the first-order meta-gradient itself (which is the gradient of
  `-sum(w a) / sum(w)`): that objective is linear in the weights, so it pushes every weight but the
  single best token's to zero, and phi then taught worse than uniform weights (docs/decisions.md:
  First-order phi learns usefulness targets).

A third target needs no gradient at all (`answer`): the task's answer tokens in the document, the
tokens whose learning the task measures. The first-order targets are the first-order estimate of the
same thing, and their most useful token is not always an answer token (how often: docs/decisions.md,
phi learns where the answer is). On LAMA-ckl
rows phi finds the answer more often from the answer itself; on invented facts it finds it less often,
so the service keeps the first-order phi (docs/decisions.md: phi learns where the answer is).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call

from core.scoring import decoder_and_head

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Pair:
    """A document and its task: token ids, and the task's ids with the index of its first answer token."""
    doc_ids: list[int]
    task_ids: list[int]
    task_start: int


def adapter_params(model: nn.Module) -> Params:
    """The adapter's tensors, named relative to the decoder stack, as fresh leaves that need gradients."""
    decoder, _, _ = decoder_and_head(model)
    return {n: p.detach().clone().requires_grad_(True) for n, p in decoder.named_parameters() if "lora_" in n}


def next_token_nll(model: nn.Module, params: Params, ids: list[int], first: int = 1) -> torch.Tensor:
    """NLL of tokens ids[first:] given their prefix, under the model with the adapter set to `params`."""
    decoder, head, softcap = decoder_and_head(model)
    device = next(decoder.parameters()).device
    x = torch.tensor([ids], device=device)
    hidden = functional_call(decoder, params, args=(), kwargs={"input_ids": x, "use_cache": False}).last_hidden_state
    logits = head(hidden[0, first - 1 : len(ids) - 1])
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return nn.functional.cross_entropy(logits, x[0, first:], reduction="none")


def weighted_loss(model: nn.Module, params: Params, doc_ids: list[int], weights: torch.Tensor) -> torch.Tensor:
    """sum_t w_t l_t / sum_t w_t over the predicted tokens (weights[0] is ignored). The loss does not change when
    every weight is scaled, so nothing stops the exact meta-gradient from driving a document's weights all
    towards 0; the floor under the sum keeps that a loss of 0 (nothing learned) instead of 0 / 0."""
    w = weights[1:].to(next(iter(params.values())).device)
    return (w * next_token_nll(model, params, doc_ids)).sum() / w.sum().clamp_min(1e-12)


def task_loss(model: nn.Module, params: Params, pair: Pair) -> torch.Tensor:
    return next_token_nll(model, params, pair.task_ids, first=pair.task_start).mean()


def sgd_step(params: Params, loss: torch.Tensor, lr: float, differentiable: bool) -> Params:
    grads = torch.autograd.grad(loss, list(params.values()), create_graph=differentiable)
    return {name: p - lr * g for (name, p), g in zip(params.items(), grads)}


def exact_outer_loss(model: nn.Module, theta: Params, pair: Pair, weights: torch.Tensor, lr: float) -> torch.Tensor:
    """The task loss after one weighted inner step from theta, differentiable in `weights` (second order)."""
    updated = sgd_step(theta, weighted_loss(model, theta, pair.doc_ids, weights), lr, differentiable=True)
    return task_loss(model, updated, pair)


def outer_loss_after_step(model: nn.Module, theta: Params, pair: Pair, weights: torch.Tensor, lr: float) -> float:
    """The same number without the meta-gradient: what validation reports."""
    updated = sgd_step(theta, weighted_loss(model, theta, pair.doc_ids, weights.detach()), lr, differentiable=False)
    with torch.no_grad():
        return float(task_loss(model, updated, pair))


def alignments(model: nn.Module, theta: Params, pair: Pair, lr: float) -> torch.Tensor:
    """a_t for every token of the document (a_0 = 0: position 0 is never predicted)."""
    stepped = sgd_step(theta, task_loss(model, theta, pair), lr, differentiable=False)
    with torch.no_grad():
        before = next_token_nll(model, theta, pair.doc_ids)
        after = next_token_nll(model, stepped, pair.doc_ids)
    return torch.cat([torch.zeros(1), (before - after).cpu()])


def usefulness_targets(alignment: torch.Tensor) -> torch.Tensor:
    """y_t = clamp(a_t / max a, 0, 1) over predicted tokens (y_0 = 0); all zeros when no token helps."""
    a = alignment.clone()
    a[0] = 0.0
    best = a[1:].max()
    return (a / best).clamp(0.0, 1.0) if best > 0 else torch.zeros_like(a)


def first_order_objective(weights: torch.Tensor, alignment: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of phi's weights against the usefulness targets, over predicted tokens."""
    targets = usefulness_targets(alignment).to(weights)
    return nn.functional.binary_cross_entropy(weights[1:].clamp(1e-6, 1 - 1e-6), targets[1:])


def answer_objective(weights: torch.Tensor, answer_mask: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of phi's weights against 1 on the task's answer tokens in the document, 0
    elsewhere, over predicted tokens."""
    return nn.functional.binary_cross_entropy(weights[1:].clamp(1e-6, 1 - 1e-6), answer_mask[1:].to(weights))
