"""phi's training examples and what is computed once per uuid for them, cached beside the run folder.

The trunk's features (and for the first-order variant the alignments) do not depend on phi, so they are
computed once per uuid and kept in `cache/` beside `--out`: an interrupted run resumes (`--resume`) without
redoing them, and the phis of other folds, heads and benchmarks (bench/phi_heads.py) reuse them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from core.model.loader import LoadedModel
from core.scoring import encode_probe
from research import lama_ckl
from research.train_attention import meta
from research.train_attention.config import TrainConfig
from workers import weighting
from workers.train_attention import phi


@dataclass
class MetaExample:
    uuid: str
    pair: meta.Pair
    features: torch.Tensor  # [tokens, layers * hidden], from the frozen trunk
    object_mask: torch.Tensor  # 1.0 on the object's tokens in the document (for validation only)
    weight: float = 1.0  # the pair's share in phi's loss (see --balance)


def build_examples(loaded: LoadedModel, model: torch.nn.Module, rows: list[lama_ckl.Row], config: phi.PhiConfig,
                   max_tokens: int, cache: Path) -> list[MetaExample]:
    """Token ids, trunk features and object masks per row; the features are cached in `cache`."""
    stored = torch.load(cache) if cache.exists() else {}
    examples = []
    for row in tqdm(rows, desc="trunk features", leave=False):
        enc = loaded.tokenizer(row.evidence, return_offsets_mapping=True, truncation=True, max_length=max_tokens)
        ids = enc["input_ids"]
        task_ids, start = encode_probe(loaded.tokenizer, row.probe)
        mask = weighting.oracle(enc["offset_mapping"], row.evidence, [row.object])
        if row.uuid not in stored:
            stored[row.uuid] = phi.trunk_features(model, ids, config).half()
        examples.append(MetaExample(row.uuid, meta.Pair(ids, task_ids, start), stored[row.uuid].float(),
                                    torch.tensor(mask)))
    cache.parent.mkdir(parents=True, exist_ok=True)
    torch.save(stored, cache)
    return examples


def features_cache_name(config: phi.PhiConfig, max_tokens: int) -> str:
    """One cache per window length and set of trunk layers: heads reading other layers never share one."""
    return f"features-{max_tokens}-layers-{'-'.join(map(str, config.layers))}.pt"


def alignments_cache_name(train_config: TrainConfig) -> str:
    return f"alignments-{train_config.max_tokens}-{train_config.inner_lr}.pt"


def cached_alignments(model: torch.nn.Module, examples: list[MetaExample], inner_lr: float,
                      cache: Path) -> dict[str, torch.Tensor]:
    stored = torch.load(cache) if cache.exists() else {}
    theta = meta.adapter_params(model)
    missing = [e for e in examples if e.uuid not in stored]
    for i, ex in enumerate(tqdm(missing, desc="alignments", leave=False)):
        stored[ex.uuid] = meta.alignments(model, theta, ex.pair, inner_lr)
        if i % 50 == 49:  # the slow part: keep what is done if interrupted
            torch.save(stored, cache)
    torch.save(stored, cache)
    return stored
