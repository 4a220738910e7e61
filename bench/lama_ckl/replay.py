"""Mix-review for LAMA-ckl: the base model's own text replayed beside the documents.

The Train-Attention paper's best Total Knowledge mixes general text into training. A corpus of facts could
hold the NF rows' facts and rehearse them, so the replay here is sampled from the untouched base model itself,
after an English sentence starter: the NLL of a model's own samples is, in expectation, the cross-entropy to
its distribution, so training on them pulls the adapter back toward what the model said before the
documents, whatever the prompt. Each training batch gets `PER_BATCH` replay windows, uniformly weighted.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from core.model.loader import LoadedModel
from core.training import Example
from workers import weighting

STARTERS = ("The", "In", "A", "This", "It", "He", "She", "They")  # English text, no fact in the prompt
SAMPLES = 128  # replay windows; each epoch goes on where the last one stopped
LENGTH = 64  # new tokens per window
TOP_P = 0.95  # nucleus sampling: the model's distribution without its long tail of noise
PER_BATCH = 2  # replay windows beside each batch's documents
GENERATE_BATCH = 16


@torch.no_grad()
def sample(loaded: LoadedModel, n: int = SAMPLES, length: int = LENGTH, seed: int = 0) -> list[list[int]]:
    """`n` token sequences (BOS, a starter, `length` sampled tokens), seeded."""
    tokenizer, model = loaded.tokenizer, loaded.model
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    out: list[list[int]] = []
    for start in range(0, n, GENERATE_BATCH):
        count = min(GENERATE_BATCH, n - start)
        starters = [STARTERS[(start + i) % len(STARTERS)] for i in range(count)]
        # Every starter is one token, so the batch needs no padding.
        ids = torch.tensor([tokenizer(s)["input_ids"] for s in starters], device=device)
        generated = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0,
                                   top_p=TOP_P, temperature=1.0, max_new_tokens=length, min_new_tokens=length,
                                   pad_token_id=tokenizer.pad_token_id)
        out += generated.tolist()
    return out


def cache_name(model_name: str, seed: int) -> str:
    """One file per model, seed and sampling settings: a changed setting never reuses old samples."""
    return f"replay-{model_name.replace('/', '_')}-seed{seed}-{SAMPLES}x{LENGTH}-p{TOP_P}.json"


def cached(loaded: LoadedModel, path: Path, seed: int = 0) -> list[list[int]]:
    """The samples of `sample`, kept in `path` (see `cache_name`)."""
    if path.exists():
        return json.loads(path.read_text())
    sequences = sample(loaded, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sequences))
    return sequences


def examples(sequences: list[list[int]]) -> list[Example]:
    return [Example(s, weighting.uniform(len(s))) for s in sequences]


def interleave(order: list[Example], replay: list[Example], batch_size: int, per_batch: int,
               start: int) -> tuple[list[Example], int]:
    """`order` in batches of `batch_size`, each followed by `per_batch` replay windows taken in turn from
    `start`; returns the examples (to be cut into batches of `batch_size + per_batch`) and where the next
    call starts."""
    out: list[Example] = []
    for first in range(0, len(order), batch_size):
        batch = order[first : first + batch_size]
        out += batch + [replay[(start + i) % len(replay)] for i in range(per_batch)]
        start += per_batch
    return out, start % len(replay)
