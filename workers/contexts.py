"""The contexts a document is trained in besides its own windows.

A memory reads its slots from the context before each token, so a fact written while reading the
second sentence of a document is found again only after that same first sentence. A question starts
where a sentence starts; training each later sentence also on its own (after the document's first
token, the BOS) writes the fact where such a question reads it. Without these contexts the memory
fitted the document's text and still missed its probes (docs/decisions.md: Memory: later sentences
trained on their own).
"""
from __future__ import annotations

from core.subjects import SENTENCE_END
from core.training import Example


def sentence_starts(text: str, offsets: list[tuple[int, int]]) -> list[int]:
    """Indices of the tokens that begin a sentence after the first: tokens with text (not only whitespace)
    such that a sentence ends after the previous token starts and no later than this one starts."""
    ends = [m.end() for m in SENTENCE_END.finditer(text)]
    return [i for i in range(2, len(offsets)) if text[offsets[i][0]:offsets[i][1]].strip()
            and any(offsets[i - 1][0] < e <= offsets[i][0] for e in ends)]


def sentence_examples(ids: list[int], weights: list[float], offsets: list[tuple[int, int]], text: str,
                      bos_token_id: int | None, window: int) -> list[Example]:
    """Each later sentence as its own example with the document's weights for its tokens; none without weight.
    Each starts with the BOS when the document does. A sentence longer than the window gives its first
    window (the document's own windows cover all of it)."""
    starts = sentence_starts(text, offsets)
    prefix = ids[:1] if ids and bos_token_id is not None and ids[0] == bos_token_id else []
    examples = []
    for start, end in zip(starts, [*starts[1:], len(ids)]):
        chunk_ids = (prefix + ids[start:end])[:window]
        chunk_w = ([0.0] + weights[start:end] if prefix else [0.0] + weights[start + 1 : end])[:window]
        if any(chunk_w):
            examples.append(Example(chunk_ids, chunk_w))
    return examples
