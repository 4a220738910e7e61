"""A product-key memory layer added beside one decoder layer's MLP (Lample et al. 2019; Berges et al. 2024).

A query projection of the hidden state is split per head into two halves; each half scores
`n_sub_keys` sub-keys and keeps its top-k; the k x k grid of sums is re-ranked to the final top-k,
softmaxed, and the chosen value rows are summed with an embedding-bag gather. Slots are
`n_sub_keys ** 2`. The values start at zero, so a model with the memory attached computes exactly
what the base model computes (version 0), and a learned fact lives in a few value rows.

The query projection and the sub-keys are fixed (never trained): the query is a projection of the
normalised hidden state (similar contexts give similar queries). Fitted on background text, the
projection first whitens the hidden state (subtracts the background's mean and evens out its
directions: otherwise the few directions every context shares decide the slots, and a question
about a new subject reads the same slots as every question of its kind), and the sub-keys are the
query halves of background positions, so that slots cover the contexts the model sees.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from core.fileio import read_json, write_json_atomic


@dataclass(frozen=True)
class MemoryConfig:
    layer: int  # index of the decoder layer whose MLP output the memory adds to
    n_sub_keys: int = 256
    heads: int = 4
    k: int = 32
    key_dim: int = 128  # per head; each half has key_dim // 2
    seed: int = 0
    # Multiplies the key scores before the softmax over the top-k (an inverse temperature). The fixed
    # keys' scores differ little, so at 1 every read slot gets ~1/k of the weight and a written row
    # reaches any context that reads it at all; sharper, it mostly reaches the contexts it fits best.
    # Sharper reads kept fewer of the taught facts (docs/decisions.md: Memory score scale 1).
    score_scale: float = 1.0

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
    carries_knowledge = True  # core.model.base_only switches it off through `enabled`

    def __init__(self, config: MemoryConfig, hidden_size: int) -> None:
        super().__init__()
        self.config = config
        gen = torch.Generator().manual_seed(config.seed)
        half = config.key_dim // 2
        self.query = nn.Parameter(torch.randn(hidden_size, config.heads * config.key_dim, generator=gen)
                                  / hidden_size**0.5, requires_grad=False)
        self.query_bias = nn.Parameter(torch.zeros(config.heads * config.key_dim), requires_grad=False)
        self.sub_keys = nn.Parameter(torch.randn(config.heads, 2, config.n_sub_keys, half, generator=gen) / half**0.5,
                                     requires_grad=False)
        self.values = nn.Parameter(torch.zeros(config.slots, hidden_size))
        self.last_slots: torch.Tensor | None = None  # [batch, seq, heads * k] of the last forward pass
        self.enabled = True  # off: the layer adds nothing (what the base model computes)

    def queries(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., hidden] -> [..., heads, 2, key_dim // 2]."""
        c = self.config
        x = nn.functional.normalize(hidden.float(), dim=-1)
        return (x @ self.query + self.query_bias).view(*hidden.shape[:-1], c.heads, 2, c.key_dim // 2)

    def lookup(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Slot indices and their softmax weights, [..., heads, k] each."""
        scores = torch.einsum("...hcd,hcsd->...hcs", self.queries(hidden), self.sub_keys)
        best, slots = product_topk(scores, self.config.k)
        return slots, (best * self.config.score_scale).softmax(dim=-1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        slots, weights = self.lookup(hidden)
        self.last_slots = slots.flatten(-2).detach()
        flat_slots = slots.reshape(-1, self.config.heads * self.config.k)
        flat_weights = weights.reshape(flat_slots.shape).to(self.values.dtype)
        out = nn.functional.embedding_bag(flat_slots, self.values, per_sample_weights=flat_weights, mode="sum")
        return out.view(*hidden.shape).to(hidden.dtype)


def _layer(model: nn.Module, index: int) -> nn.Module:
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return causal_lm.model.layers[index]


def attach(model: nn.Module, config: MemoryConfig) -> ProductKeyMemory:
    """Add a memory beside the MLP of decoder layer `config.layer` (in place): the MLP's output becomes
    MLP(x) + memory(x). A forward hook, so every existing parameter keeps its name (adapters still load)."""
    layer = _layer(model, config.layer)
    if hasattr(layer, "memory"):
        raise ValueError(f"layer {config.layer} already has a memory")
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    memory = ProductKeyMemory(config, causal_lm.config.hidden_size).to(next(layer.parameters()).device)
    layer.memory = memory
    memory.hook = layer.mlp.register_forward_hook(
        lambda _mlp, args, out: out + memory(args[0]) if memory.enabled else out)
    return memory


# -- the version-0 state: fixed keys and query, and the background's slot statistics --------------------
BASE_FILE = "base.safetensors"
KEY_TENSORS = ("query", "query_bias", "sub_keys")
CONFIG_FILE = "base.json"
BASE_FILES = (BASE_FILE, CONFIG_FILE)


def save_base(folder: Path, memory: ProductKeyMemory, statistics: dict[str, torch.Tensor], meta: dict) -> None:
    """Written once per data folder, before any memory version exists (temp files, then rename).
    `statistics`: per-slot tensors of the background; `meta`: its counts and source (JSON)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (BASE_FILE + ".tmp")
    tensors = {name: getattr(memory, name).detach().cpu().contiguous() for name in KEY_TENSORS}
    save_file({**tensors, **{k: v.contiguous() for k, v in statistics.items()}}, str(tmp))
    write_json_atomic(folder / CONFIG_FILE, {"config": asdict(memory.config), **meta})
    tmp.replace(folder / BASE_FILE)


def load_base(folder: Path) -> tuple[MemoryConfig, dict[str, torch.Tensor], dict] | None:
    """(config, stored tensors, meta), or None before the first memory update."""
    meta = read_json(folder / CONFIG_FILE)
    if meta is None or not (folder / BASE_FILE).exists():
        return None
    return MemoryConfig(**meta.pop("config")), load_file(str(folder / BASE_FILE)), meta


def attach_base(model: nn.Module, folder: Path) -> ProductKeyMemory | None:
    """Attach the data folder's memory (keys as stored, values zero); None when it has none yet."""
    base = load_base(folder)
    if base is None:
        return None
    config, tensors, _ = base
    memory = attach(model, config)
    set_keys(memory, tensors)
    return memory


def set_keys(memory: ProductKeyMemory, tensors: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name in KEY_TENSORS:
            getattr(memory, name).copy_(tensors[name])


def write_rows(memory: ProductKeyMemory, rows: torch.Tensor | None, values: torch.Tensor | None) -> None:
    if rows is not None and rows.numel():
        with torch.no_grad():
            memory.values[rows.to(memory.values.device)] = values.to(memory.values)


def clear_rows(memory: ProductKeyMemory, rows: torch.Tensor | None) -> None:
    if rows is not None and rows.numel():
        with torch.no_grad():
            memory.values[rows.to(memory.values.device)] = 0.0
