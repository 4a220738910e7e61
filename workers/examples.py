"""Training examples from a document: its token weights and the windows the training loop sees.

One module for the learner and every benchmark, so a benchmark measures the examples the service trains on.
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from core import registry, routing, subjects
from core.scoring import join_probe
from core.settings import Settings
from core.training import Example
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
    """Each probe as text, with weight on its answer's tokens only; a news prompt also without its time markers
    ("... is now" is asked as "... is")."""
    variants = [(subjects.without_time_markers(prompt), answer) for prompt, answer in probes]
    examples = []
    for prompt, answer in dict.fromkeys([*probes, *variants]):
        doc = encode(tokenizer, join_probe(prompt, answer))
        weights = weighting.oracle(doc.offsets, doc.text, [answer])
        if any(weights):
            examples.append(Example(doc.ids, weights))
    return examples


def auto_probes(doc: Encoded, weights: list[float], min_prompt_words: int = 3) -> list[tuple[str, str]]:
    """Probes made from the document itself, for a document sent without any: the questions a reader would ask.

    The answer is what a fact gives about its subject: in each sentence, the name (or, in a document without one,
    the number) that phi weighs most, never one of the document's subjects (a name a sentence starts with, or one
    used in two sentences), and the prompt is the sentence up to it, without time markers ("is now" asks "is").
    A document with neither gets one probe: its rarest word (phi's weight breaking ties), a subject's only when
    there is no other."""
    sentences = sentence_spans(doc.text)
    spans = subjects.name_spans(doc.text)
    subject_words = {w for name in document_subjects(doc.text, sentences, spans) for w in name.split()}

    def answer_weight(begin: int, end: int) -> float:
        return max((w for w, (a, b) in zip(weights, doc.offsets) if a < end and b > begin and b > a), default=0.0)

    def best_per_sentence(candidates: list[tuple[int, int]], rank: Callable[[int, int], float] = answer_weight,
                          least_words: int = min_prompt_words) -> list[tuple[float, str, str]]:
        made = []
        for begin, end in sentences:
            inside = [(a, b) for a, b in candidates if begin <= a < end and len(doc.text[begin:a].split()) >= least_words]
            if inside:
                a, b = max(inside, key=lambda span: (rank(*span), span[0]))
                prompt = subjects.without_time_markers(doc.text[begin:a].strip())  # what a reader asks
                made.append((rank(a, b), prompt, doc.text[a:b].strip()))
        return made

    names = [(a, b) for a, b, name in spans if not set(name.split()) <= subject_words]
    numbers = [m.span() for m in NUMBER.finditer(doc.text)]
    if made := best_per_sentence(names) or best_per_sentence(numbers):
        return [(prompt, answer) for _, prompt, answer in made]
    # Among the other words, one English never uses is most likely what the document teaches; a short sentence
    # ("Driva is a river.") still gives its last word.
    words = [m.span() for m in subjects.WORD.finditer(doc.text) if m.group().lower() not in subjects.FUNCTION_WORDS]
    other = [(a, b) for a, b in words if doc.text[a:b].lower() not in subject_words]
    rarest = lambda a, b: subjects.weight(doc.text[a:b].lower()) + answer_weight(a, b)
    made = (best_per_sentence(other, rarest) or best_per_sentence(other, rarest, least_words=1)
            or best_per_sentence(words, rarest, least_words=1))
    return [(prompt, answer) for _, prompt, answer in sorted(made, reverse=True)[:1]]


NUMBER = re.compile(r"\b\d[\d,.]*\d\b|\b\d\b")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Each sentence's character range, without the spaces around it."""
    bounds = [0, *(m.end() for m in contexts.SENTENCE_END.finditer(text)), len(text)]
    spans = []
    for begin, end in itertools.pairwise(bounds):
        chunk = text[begin:end]
        if chunk.strip():
            lead = len(chunk) - len(chunk.lstrip())
            spans.append((begin + lead, begin + len(chunk.rstrip())))
    return spans


def document_subjects(text: str, sentences: list[tuple[int, int]], spans: list[tuple[int, int, str]]) -> set[str]:
    """The names a document is about: one that starts a sentence (after its function words), or one used in two
    sentences."""
    found: set[str] = set()
    used_in: dict[str, set[int]] = {}
    for a, _, name in spans:
        sentence = next(i for i, (begin, end) in enumerate(sentences) if begin <= a <= end)
        used_in.setdefault(name, set()).add(sentence)
        lead = text[sentences[sentence][0]:a].split()
        if all(w.lower() in subjects.FUNCTION_WORDS for w in lead):
            found.add(name)
    return found | {name for name, where in used_in.items() if len(where) > 1}


def checkable_auto_probes(doc: Encoded, weights: list[float],
                          unreachable: Callable[[list[tuple[str, str]]], list[str]]) -> list[tuple[str, str]]:
    """The auto-probes a document is trained and gated on: those whose answer is not another's subject, less those
    its method could not route to it (`unreachable`: their prompts; the key depends on all the probes, so again
    until none is left out)."""
    made = without_subject_answers(auto_probes(doc, weights))
    while left_out := set(unreachable(made)):
        made = [(prompt, answer) for prompt, answer in made if prompt not in left_out]
    return made


def without_subject_answers(made: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Auto-probes less those whose answer another probe's prompt names: that answer is what the other probe is
    about (the subject: "The Republic of" -> "Veltoria"), not what the document teaches, and as an answer it
    would be left out of a routed document's key, so no probe could reach the document."""
    return [(prompt, answer) for prompt, answer in made
            if not any(subjects.words(answer) & subjects.words(other) for other, _ in made if other != prompt)]


def unreachable(method: str, text: str, settings: Settings) -> Callable[[list[tuple[str, str]]], list[str]]:
    """Which of a document's made probes could not reach it (for a per-document method, the framework's routing: a
    probe must name the document's key); a whole-version method's reach every prompt."""
    if not registry.get(method).per_document:
        return lambda probes: []
    return lambda probes: routing.unreachable(text, probes, settings.routing_threshold)
