"""Training examples from a document: its token weights and the windows the training loop sees.

One module for the learner and every benchmark, so a benchmark measures the examples the service trains on.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workers import contexts, weighting
from workers.methods.base import Example

WEIGHTINGS = ("train_attention", "uniform", "oracle")


@dataclass(frozen=True)
class Encoded:
    """A tokenized document: ids, each token's character range, and the text they index."""
    text: str
    ids: list[int]
    offsets: list[tuple[int, int]]


def encode(tokenizer, text: str, max_tokens: int | None = None) -> Encoded:
    enc = tokenizer(text, return_offsets_mapping=True, truncation=max_tokens is not None, max_length=max_tokens)
    return Encoded(text, enc["input_ids"], [tuple(o) for o in enc["offset_mapping"]])


def token_weights(doc: Encoded, how: str, answers: list[str], phi_weights: Callable[[list[int]], list[float]] | None,
                  threshold: float) -> list[float]:
    """Weights of the predicted tokens: phi's above `threshold` of the largest (train_attention), 1 on the
    answers' occurrences in the text (oracle), or uniform."""
    if how == "train_attention":
        assert phi_weights is not None, "train_attention weighting needs phi"
        return weighting.thresholded(phi_weights(doc.ids), threshold)
    if how == "oracle":
        return weighting.oracle(doc.offsets, doc.text, answers)
    return weighting.uniform(len(doc.ids))


def windows(ids: list[int], weights: list[float], window: int) -> list[Example]:
    """The document in windows of `window` tokens that overlap by one (a window's first token is context);
    a window with no weight is left out."""
    examples = []
    for start in range(0, max(len(ids) - 1, 1), window - 1):
        chunk_ids, chunk_w = ids[start : start + window], weights[start : start + window]
        if start:
            chunk_w = [0.0, *chunk_w[1:]]
        if any(chunk_w):
            examples.append(Example(chunk_ids, chunk_w))
    return examples


def document_examples(doc: Encoded, weights: list[float], window: int, bos_token_id: int | None,
                      sentences: bool = False) -> list[Example]:
    """The windows, and with `sentences` each later sentence on its own too (workers/contexts.py)."""
    examples = windows(doc.ids, weights, window)
    if sentences:
        examples += contexts.sentence_examples(doc.ids, weights, doc.offsets, doc.text, bos_token_id, window)
    return examples
