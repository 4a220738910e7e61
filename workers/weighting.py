"""Per-token training weights. A weight belongs to the predicted token: position 0 is never predicted.

- uniform: every predicted token counts the same (plain fine-tuning).
- oracle: weight 1 on tokens inside an occurrence of a probe's answer in the text, 0 elsewhere;
  usable when the document comes with probes.
- train_attention: phi's weights (workers/train_attention), with the small ones (relative to the document's
  largest) set to 0 so those tokens need no LM-head logits.
"""
from __future__ import annotations


def uniform(n_tokens: int) -> list[float]:
    return [0.0] + [1.0] * (n_tokens - 1)


def thresholded(weights: list[float], threshold: float) -> list[float]:
    """0 for weights below `threshold` times the largest one (the loss is normalised by the weights' sum,
    so only their ratios matter, and a relative cut behaves the same for any phi's scale)."""
    cut = threshold * max(weights, default=0.0)
    return [w if w >= cut and w > 0 else 0.0 for w in weights]


def floored(weights: list[float], floor: float) -> list[float]:
    """Every predicted token gets at least `floor` of the largest weight: phi's weights lift the tokens it
    finds useful above a base that still teaches the whole text (for a method whose delta reaches only the
    prompts routed to it, learning every token costs no locality)."""
    top = max(weights[1:], default=0.0)
    if top <= 0:
        return uniform(len(weights))
    return [0.0] + [floor + (1 - floor) * w / top for w in weights[1:]]


def overlapping(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[bool]:
    """Whether each token's character range overlaps one of `spans`."""
    return [any(s < end and e > start for start, end in spans) for s, e in offsets]


def without_spans(weights: list[float], offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[float]:
    """0 for the tokens whose character range overlaps one of `spans`."""
    return [0.0 if hit else w for w, hit in zip(weights, overlapping(offsets, spans))]


def answer_spans(text: str, answers: list[str]) -> list[tuple[int, int]]:
    spans = []
    for answer in {a.strip() for a in answers if a.strip()}:
        start = text.find(answer)
        while start >= 0:
            spans.append((start, start + len(answer)))
            start = text.find(answer, start + 1)
    return spans


def oracle(offsets: list[tuple[int, int]], text: str, answers: list[str]) -> list[float]:
    """1.0 for tokens whose character range overlaps an occurrence of an answer in `text` (offsets from
    the tokenizer), 0 elsewhere."""
    hits = overlapping(offsets, answer_spans(text, answers))
    weights = [1.0 if hit and e > s else 0.0 for hit, (s, e) in zip(hits, offsets)]
    if weights:
        weights[0] = 0.0
    return weights
