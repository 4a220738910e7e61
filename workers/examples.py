"""Training examples from a document: its token weights and the windows the training loop sees.

One module for the learner and every benchmark, so a benchmark measures the examples the service trains on.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.scoring import join_probe
from core.training import Example
from methods.routed import routing
from workers import contexts, weighting

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
                  threshold: float, floor: float = 0.0) -> list[float]:
    """Weights of the predicted tokens: phi's above `threshold` of the largest (train_attention), or with a
    floor under them when one is given; 1 on the answers' occurrences in the text (oracle); or uniform."""
    if how == "train_attention":
        assert phi_weights is not None, "train_attention weighting needs phi"
        weights = phi_weights(doc.ids)
        return weighting.floored(weights, floor) if floor else weighting.thresholded(weights, threshold)
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


def probe_examples(tokenizer, probes: list[tuple[str, str]]) -> list[Example]:
    """Each probe as text, with weight on its answer's tokens only."""
    examples = []
    for prompt, answer in probes:
        doc = encode(tokenizer, join_probe(prompt, answer))
        weights = weighting.oracle(doc.offsets, doc.text, [answer])
        if any(weights):
            examples.append(Example(doc.ids, weights))
    return examples


def auto_probes(doc: Encoded, weights: list[float], min_prompt_words: int = 3) -> list[tuple[str, str]]:
    """Probes made from the document itself, for a document sent without any. In each sentence the answer is
    the word of the most-weighted token among content words (rarer than everyday English), with the
    capitalised words next to it when it is capitalised (a name), and the prompt is the sentence up to it
    (the next best word when the prompt would have fewer than `min_prompt_words` words)."""
    starts = [1, *contexts.sentence_starts(doc.text, doc.offsets), len(doc.ids)]
    spans = [word_at(doc.text, doc.offsets[i][0]) for i in range(len(doc.ids))]
    probes = []
    for start, end in zip(starts, starts[1:]):
        content = [i for i in range(start + 1, end) if weights[i] > 0 and spans[i][0] < spans[i][1]
                   and routing.weight(doc.text[spans[i][0]:spans[i][1]].lower()) > 0]
        sentence_start = doc.offsets[start][0]
        for token in sorted(content, key=lambda i: -weights[i]):  # the best word that leaves a prompt
            begin, finish = spans[token]
            if doc.text[begin].isupper():
                begin, finish = capitalised_run(doc.text, sentence_start, begin, finish)
            prompt, answer = doc.text[sentence_start:begin].strip(), doc.text[begin:finish].strip()
            if answer and len(prompt.split()) >= min_prompt_words:
                probes.append((prompt, answer))
                break
    return probes


def word_at(text: str, position: int) -> tuple[int, int]:
    """The character range of the word around `position` (empty where there is none)."""
    while position < len(text) and text[position].isspace():
        position += 1
    begin = finish = position
    while begin > 0 and text[begin - 1].isalnum():
        begin -= 1
    while finish < len(text) and text[finish].isalnum():
        finish += 1
    return begin, finish


def capitalised_run(text: str, floor: int, begin: int, finish: int) -> tuple[int, int]:
    """Grow a capitalised word over the capitalised words right before and after it (not before `floor`)."""
    while True:
        before = text[floor:begin].rstrip()
        previous = before.split()[-1] if before.split() else ""
        if not previous.isalpha() or not previous[0].isupper() or len(before) - len(previous) <= 0:
            break
        begin = floor + len(before) - len(previous)
    while True:
        after = text[finish:]
        following = after.split()[0] if after.split() else ""
        word = following.rstrip(".,;:!?")
        if not word.isalnum() or not word[0].isupper():
            break
        finish = finish + after.index(following) + len(word)
    return begin, finish


def without_subject_answers(made: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Auto-probes less those whose answer another probe's prompt names: that answer is what the other probe is
    about (the subject: "The Republic of" -> "Veltoria"), not what the document teaches, and as an answer it
    would be left out of a routed document's key, so no probe could reach the document."""
    return [(prompt, answer) for prompt, answer in made
            if not any(routing.words(answer) & routing.words(other) for other, _ in made if other != prompt)]

