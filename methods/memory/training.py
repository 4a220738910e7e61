"""The sparse-memory method: only the memory slots most specific to the new text are trained.

Per batch, count which slots the memory reads at the positions that carry training weight (TF),
rank them by TF-IDF against how many background documents read each slot (DF), and let only the
top-t value rows move, with plain SGD (Adam's moments would keep moving rows after they leave the
top-t). "Hub" slots, read at a large share of all background positions, are never written: a
change there would reach everything. The delta is sparse: the changed rows' indices and values.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from core.leases import MEMORY_LOCK
from core.probes import shipped_pool
from core.scoring import join_probe
from core.served import LoadDelta
from core.settings import Settings
from core.storage import method_files, method_lock
from core.training import Example, UpdateMethod, weighted_positions
from methods.memory import layer as memory_layer
from methods.memory.config import MemorySettings


@dataclass
class Background:
    """Per-slot statistics over a background corpus of `documents` texts and `positions` tokens."""
    df: torch.Tensor  # [slots], int: documents that read the slot at any position
    documents: int
    reads: torch.Tensor  # [slots], int: positions that read the slot
    positions: int

    @classmethod
    def empty(cls, slots: int) -> Background:
        return cls(torch.zeros(slots, dtype=torch.long), 0, torch.zeros(slots, dtype=torch.long), 0)

    def stored(self) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
        """(tensors, counts) as the version-0 state stores them."""
        return {"df": self.df, "reads": self.reads}, {"documents": self.documents, "positions": self.positions}

    @classmethod
    def from_stored(cls, tensors: dict[str, torch.Tensor], meta: dict) -> Background:
        return cls(tensors["df"], meta["documents"], tensors["reads"], meta["positions"])


def hubs(background: Background, max_read_share: float) -> torch.Tensor:
    """Slots read at more than `max_read_share` of the background's positions (a bool mask).

    A share of positions, not of documents: with k slots read per head at every position, most slots
    are read somewhere in a few hundred documents, but only hubs are read everywhere (docs/decisions.md:
    Memory hub slots: a share of positions)."""
    if background.positions == 0:
        return torch.zeros_like(background.reads, dtype=torch.bool)
    return background.reads.float() / background.positions > max_read_share


def tfidf(tf: torch.Tensor, background: Background) -> torch.Tensor:
    """tf(i) / sum tf * log((|B| + 1) / (df(i) + 1)); slots never read score 0; no background: TF alone."""
    share = tf / tf.sum().clamp(min=1)
    if background.documents == 0:
        return share
    return share * torch.log((background.documents + 1) / (background.df.float() + 1))


def kl_score(tf: torch.Tensor, background: Background) -> torch.Tensor:
    """p_batch(i) log(p_batch(i) / p_bg(i)) with add-one smoothing of the background."""
    p_batch = tf / tf.sum().clamp(min=1)
    p_bg = (background.df.float() + 1) / (background.df.sum() + background.df.numel())
    return torch.where(tf > 0, p_batch * torch.log(p_batch / p_bg), torch.zeros_like(p_batch))


def top_slots(scores: torch.Tensor, tf: torch.Tensor, t: int) -> torch.Tensor:
    """Indices of the t best-scoring slots among those read, never one that scores 0: a "hub" slot that
    every background document reads (idf 0) would change the model everywhere if it were written."""
    read = ((tf > 0) & (scores > 0)).nonzero().squeeze(-1)
    return read[scores[read].topk(min(t, read.numel())).indices]


def memory_shape(config: MemorySettings, model: PreTrainedModel) -> memory_layer.MemoryConfig:
    """The memory layer the settings ask for (CKL_MEMORY_*)."""
    layers = model.config.num_hidden_layers
    return memory_layer.MemoryConfig(
        layer=config.layer if config.layer is not None else layers * 2 // 3, n_sub_keys=config.sub_keys,
        heads=config.heads, k=config.k, key_dim=config.key_dim, score_scale=config.score_scale)


class MemoryMethod(UpdateMethod):
    name = "memory"
    sentence_contexts = True  # slots are found by context: write the fact where a question reads it

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: Settings,
                 shape: memory_layer.MemoryConfig | None = None) -> None:
        super().__init__(model, tokenizer, settings)
        self.shape = shape or memory_shape(self.config, model)
        self.memory = memory_layer.attach(model, self.shape)
        self._model = model
        self.background = Background.empty(self.shape.slots)  # none: TF alone
        self.top_t, self.score = self.config.top_t, self.config.score
        self.max_read_share = self.config.max_read_share
        self.rows_touched: set[int] = set()

    @classmethod
    def build(cls, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: Settings) -> MemoryMethod:
        """The memory on the learner's model. Its version-0 state (keys, background statistics) is fitted once
        per data folder from the background corpus and stored under <data>/memory; later builds read it."""
        files = method_files(settings, "memory")
        with method_lock(settings, "memory", MEMORY_LOCK):
            files.fetch(memory_layer.BASE_FILES)  # made by another process, where none share a folder
            base = memory_layer.load_base(files.folder)
            if base is None:
                method = cls(model, tokenizer, settings)
                method.fit_background([tokenizer(text)["input_ids"] for text in background_corpus()])
                tensors, counts = method.background.stored()
                memory_layer.save_base(files.folder, method.memory, tensors,
                                       {**counts, "source": BACKGROUND_SOURCE})
                files.publish(memory_layer.BASE_FILES)
            else:
                # Made before the store was shared, or a crash came before it was published.
                files.publish(memory_layer.BASE_FILES, missing_only=True)
                shape, tensors, meta = base
                method = cls(model, tokenizer, settings, shape=shape)
                memory_layer.set_keys(method.memory, tensors)
                method.background = Background.from_stored(tensors, meta)
        return method

    @property
    def model(self) -> nn.Module:
        return self._model

    def parameters(self) -> list[nn.Parameter]:
        return [self.memory.values]

    def load(self, delta: dict[str, torch.Tensor] | None) -> None:
        with torch.no_grad():
            self.memory.values.zero_()
            if delta is not None:
                self.memory.values[delta["rows"]] = delta["values"].to(self.memory.values)
        self.rows_touched = set()

    def delta(self) -> dict[str, torch.Tensor]:
        """The rows training wrote since the last load, with their values: a sparse version."""
        rows = torch.tensor(sorted(self.rows_touched), dtype=torch.long)
        return {"rows": rows, "values": self.memory.values.detach()[rows.to(self.memory.values.device)].cpu().clone()}

    def manifest_fields(self) -> dict[str, Any]:
        return {"memory": vars(self.shape) | {"top_t": self.top_t, "score": self.score,
                                                "max_read_share": self.max_read_share},
                "hyperparameters": {"optimizer": self.config.optimizer, "learning_rate": self.config.learning_rate,
                                    "max_steps": self.settings.training.max_steps}}

    def remove(self, removed: dict[str, Any], later: list[dict[str, Any]], load_delta: LoadDelta,
               earlier: dict[str, torch.Tensor] | None, relearn: Callable[[], None]) -> bool:
        """The removed version's rows go back to their values before it; if a later version wrote some of them
        too, the state before the removed version is loaded and the later documents are trained again."""
        removed_rows = set(load_delta(removed["version"])["rows"].tolist())
        later_rows = {int(r) for manifest in later for r in load_delta(manifest["version"])["rows"]}
        if removed_rows & later_rows:
            self.load(earlier)
            relearn()
            self.rows_touched |= removed_rows | later_rows
            return True
        before = dict(zip(earlier["rows"].tolist(), earlier["values"])) if earlier is not None else {}
        with torch.no_grad():
            for row in removed_rows:
                self.memory.values[row] = before.get(row, torch.zeros(()))
        self.rows_touched |= removed_rows
        return False

    def committed(self, version: int) -> None:
        self.rows_touched = set()  # the next delta holds only the rows its own document writes

    def fit_background(self, documents: list[list[int]]) -> None:
        """The version-0 state from background text: sub-keys from its queries, then its slot statistics."""
        keys_from_background(self.model, self.memory, documents)
        self.background = background_stats(self.model, self.memory, documents)

    def restrict_gradients(self, batch: list[Example]) -> None:
        """Zero the gradient of every value row outside the batch's top-t slots."""
        rows, cols, _, _ = weighted_positions(batch, self.device)
        slots = self.memory.last_slots[rows, cols].flatten()
        tf = torch.bincount(slots, minlength=self.shape.slots).float()
        scores = (tfidf if self.score == "tfidf" else kl_score)(tf, self.background)
        scores[hubs(self.background, self.max_read_share).to(scores.device)] = 0.0
        keep = top_slots(scores, tf, self.top_t)
        grad = self.memory.values.grad
        mask = torch.zeros(self.shape.slots, 1, dtype=torch.bool, device=grad.device)
        mask[keep] = True
        grad.mul_(mask)
        self.rows_touched.update(keep.tolist())


WHITENING_FLOOR = 0.01  # eigenvalue floor, a share of the largest (the only value tried so far)
BACKGROUND_SOURCE = "the shipped probe pool's sentences (core/data/probe_pool.tsv)"


def background_corpus() -> list[str]:
    """The service's background text: the shipped pool of general-knowledge sentences, the kind of text
    the NF suite is calibrated from (slots these read get a high DF, so new facts rarely write them)."""
    return [join_probe(p.prompt, p.answer) for p in shipped_pool()]


@torch.no_grad()
def background_stats(model: nn.Module, memory: memory_layer.ProductKeyMemory, documents: list[list[int]]) -> Background:
    """How many background documents, and how many positions, read each slot."""
    stats = Background.empty(memory.config.slots)
    for ids in documents:
        model(input_ids=torch.tensor([ids], device=memory.values.device), use_cache=False)
        slots = memory.last_slots.flatten().cpu()
        stats.df[slots.unique()] += 1
        stats.reads += torch.bincount(slots, minlength=memory.config.slots)
        stats.positions += len(ids)
    stats.documents = len(documents)
    return stats


def whitening(x: torch.Tensor, floor: float = WHITENING_FLOOR) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, W) with (x - mean) @ W of identity covariance, up to a floor: each eigenvalue is raised by
    `floor` times the largest, so directions the background barely uses are not blown up into noise.
    W is scaled to the identity's Frobenius norm (the queries keep their usual size)."""
    mean = x.mean(0)
    centred = x - mean
    eigenvalues, vectors = torch.linalg.eigh(centred.T @ centred / len(x))
    if eigenvalues.max() <= 0:  # one position, or all alike: nothing to even out
        return mean, torch.eye(x.shape[1], device=x.device)
    eigenvalues = eigenvalues.clamp(min=0) + floor * eigenvalues.max()
    w = vectors @ torch.diag(eigenvalues.rsqrt()) @ vectors.T
    return mean, w * (w.shape[0] ** 0.5 / w.norm())


@torch.no_grad()
def keys_from_background(model: nn.Module, memory: memory_layer.ProductKeyMemory, documents: list[list[int]],
                         seed: int = 0) -> None:
    """On a fresh memory: whiten its (random) query projection with the background's hidden states, then
    set each head's sub-keys to the query halves of sampled background positions."""
    captured: list[torch.Tensor] = []
    hook = memory.register_forward_pre_hook(lambda _m, args: captured.append(args[0].detach().flatten(0, -2)))
    try:
        for ids in documents:
            model(input_ids=torch.tensor([ids], device=memory.values.device), use_cache=False)
    finally:
        hook.remove()
    hidden = torch.cat(captured)
    mean, w = whitening(nn.functional.normalize(hidden.float(), dim=-1))
    memory.query.copy_(w @ memory.query)
    memory.query_bias.copy_(-mean @ memory.query)
    queries = memory.queries(hidden)  # [positions, heads, 2, half]
    gen = torch.Generator().manual_seed(seed)
    n = min(memory.config.n_sub_keys, queries.shape[0])  # with too little text, the rest stay random
    for h in range(memory.config.heads):
        for c in range(2):
            picked = queries[torch.randperm(queries.shape[0], generator=gen)[:n], h, c]
            memory.sub_keys[h, c, :n] = nn.functional.normalize(picked, dim=-1)
