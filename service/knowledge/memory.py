"""A product-key memory layer added beside one decoder layer's MLP (Lample et al. 2019; Berges et al. 2024).

A query projection of the hidden state is split per head into two halves; each half scores
`n_sub_keys` sub-keys and keeps its top-k; the k x k grid of sums is re-ranked to the final top-k,
softmaxed, and the chosen value rows are summed with an embedding-bag gather. Slots are
`n_sub_keys ** 2`. The values start at zero, so a model with the memory attached computes exactly
what the base model computes (version 0), and a learned fact lives in a few value rows.

The query projection and the sub-keys are fixed (never trained): the query is a random projection
of the normalised hidden state (similar contexts give similar queries), and the sub-keys can be set
from the query halves of background text so that slots cover the contexts the model sees.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class MemoryConfig:
    layer: int  # index of the decoder layer whose MLP output the memory adds to
    n_sub_keys: int = 256
    heads: int = 4
    k: int = 32
    key_dim: int = 128  # per head; each half has key_dim // 2
    seed: int = 0

    @property
    def slots(self) -> int:
        return self.n_sub_keys**2


def product_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """scores [..., 2, n_sub] of the two halves -> (best k summed scores, slot indices) [..., k].

    Exact: the top-k of all n_sub**2 sums is always inside the grid of each half's top-k.
    """
    n_sub = scores.shape[-1]
    s1, i1 = scores[..., 0, :].topk(k, dim=-1)
    s2, i2 = scores[..., 1, :].topk(k, dim=-1)
    grid = (s1.unsqueeze(-1) + s2.unsqueeze(-2)).flatten(-2)  # [..., k * k]
    best, flat = grid.topk(k, dim=-1)
    slots = i1.gather(-1, flat // k) * n_sub + i2.gather(-1, flat % k)
    return best, slots


class ProductKeyMemory(nn.Module):
    def __init__(self, config: MemoryConfig, hidden_size: int) -> None:
        super().__init__()
        self.config = config
        gen = torch.Generator().manual_seed(config.seed)
        half = config.key_dim // 2
        self.query = nn.Parameter(torch.randn(hidden_size, config.heads * config.key_dim, generator=gen)
                                  / hidden_size**0.5, requires_grad=False)
        self.sub_keys = nn.Parameter(torch.randn(config.heads, 2, config.n_sub_keys, half, generator=gen) / half**0.5,
                                     requires_grad=False)
        self.values = nn.Parameter(torch.zeros(config.slots, hidden_size))
        self.last_slots: torch.Tensor | None = None  # [batch, seq, heads * k] of the last forward pass

    def queries(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., hidden] -> [..., heads, 2, key_dim // 2]."""
        c = self.config
        x = nn.functional.normalize(hidden.float(), dim=-1)
        return (x @ self.query).view(*hidden.shape[:-1], c.heads, 2, c.key_dim // 2)

    def lookup(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Slot indices and their softmax weights, [..., heads, k] each."""
        scores = torch.einsum("...hcd,hcsd->...hcs", self.queries(hidden), self.sub_keys)
        best, slots = product_topk(scores, self.config.k)
        return slots, best.softmax(dim=-1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        slots, weights = self.lookup(hidden)
        self.last_slots = slots.flatten(-2).detach()
        flat_slots = slots.reshape(-1, self.config.heads * self.config.k)
        flat_weights = weights.reshape(flat_slots.shape).to(self.values.dtype)
        out = nn.functional.embedding_bag(flat_slots, self.values, per_sample_weights=flat_weights, mode="sum")
        return out.view(*hidden.shape).to(hidden.dtype)


class MemoryMLP(nn.Module):
    """A decoder layer's MLP with the memory's output added: MLP(x) + memory(x)."""

    def __init__(self, mlp: nn.Module, memory: ProductKeyMemory) -> None:
        super().__init__()
        self.mlp = mlp
        self.memory = memory

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x) + self.memory(x)


def attach(model: nn.Module, config: MemoryConfig) -> ProductKeyMemory:
    """Add a memory beside the MLP of decoder layer `config.layer` (in place); returns the memory."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    layer = causal_lm.model.layers[config.layer]
    if isinstance(layer.mlp, MemoryMLP):
        raise ValueError(f"layer {config.layer} already has a memory")
    device = next(layer.mlp.parameters()).device
    memory = ProductKeyMemory(config, causal_lm.config.hidden_size).to(device)
    layer.mlp = MemoryMLP(layer.mlp, memory)
    return memory


def detach_memory(model: nn.Module, config: MemoryConfig) -> None:
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    layer = causal_lm.model.layers[config.layer]
    if isinstance(layer.mlp, MemoryMLP):
        layer.mlp = layer.mlp.mlp
