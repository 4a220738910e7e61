"""Which documents a prompt is about: a lexical key per document, and a route per prompt. Pure functions.

A document's key is its rare words, each weighted by how rare it is in general English (word frequency
from the wordfreq package: Zipf scale, 7.7 for "the", 0 for a word it has never seen). This is TF-IDF
against a background, with a background far larger than anything the service could fit itself. A
prompt is routed to every document whose key words it contains with a total weight that reaches the
threshold: several documents about one subject, or a prompt that names two subjects, use their deltas
together. A prompt that reaches none is answered by the base model. Answers are left out of the key: a
question about a fact names its subject, not its answer.

Why words and not the model's own states: on this model the hidden states and the memory's read slots
at a prompt encode its template, not its subject (docs/decisions.md: "Routing keys on rare words").
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from wordfreq import zipf_frequency

WORD = re.compile(r"[^\W\d_]+")
KEY_MAX_ZIPF = 4.5  # words more common than this (about 3 in 100,000 words of English) are never key words
WEIGHT_ORIGIN = 5.0  # a key word weighs WEIGHT_ORIGIN - its Zipf frequency


def words(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text)}


@lru_cache(maxsize=65536)
def weight(word: str) -> float:
    """How much a word says about which document a prompt is about: 5 for a word English never uses,
    1 at the key words' limit."""
    return WEIGHT_ORIGIN - zipf_frequency(word, "en")


def document_key(text: str, answers: Iterable[str] = ()) -> dict[str, float]:
    """The document's rare words and their weights, without the words of its answers."""
    excluded = set().union(*(words(a) for a in answers)) if answers else set()
    return {w: round(weight(w), 3) for w in sorted(words(text) - excluded)
            if zipf_frequency(w, "en") <= KEY_MAX_ZIPF}


def score(prompt_words: set[str], key: dict[str, float]) -> float:
    return sum(weight for word, weight in key.items() if word in prompt_words)


def route(prompt: str, keys: Sequence[tuple[str, dict[str, float]]], threshold: float) -> tuple[str, ...] | None:
    """The ids of the documents the prompt is about, in teaching order, or None for none."""
    return reached(words(prompt), keys, threshold)


def related(key: dict[str, float], keys: Sequence[tuple[str, dict[str, float]]], threshold: float) -> tuple[str, ...]:
    """The documents a document with `key` shares a subject with: those a prompt naming all its key words reaches."""
    return reached(set(key), keys, threshold) or ()


def reached(prompt_words: set[str], keys: Sequence[tuple[str, dict[str, float]]],
            threshold: float) -> tuple[str, ...] | None:
    ids = tuple(document_id for document_id, key in keys if score(prompt_words, key) >= threshold)
    return ids or None


def reaches(prompt: str, key: dict[str, float], threshold: float) -> bool:
    """Whether a prompt names a document's key strongly enough to be routed to it."""
    return score(words(prompt), key) >= threshold


def unroutable(key: dict[str, float], threshold: float) -> str | None:
    """Why no prompt could be routed to a document with `key` (None: some can)."""
    weight = sum(key.values())
    if weight >= threshold:
        return None
    return (f"no words rare enough to route prompts to this document: its key words ({', '.join(key) or 'none'}) "
            f"weigh {weight:.2f} < {threshold}")


def refusal(text: str, probes: list[tuple[str, str]], threshold: float) -> str | None:
    """What can be refused before any work: a document with no routing key, or a probe that does not name it.
    Without probes the key keeps every rare word (auto-probes' answers are left out later, which only lowers it)."""
    key = document_key(text, [answer for _, answer in probes])
    if reason := unroutable(key, threshold):
        return reason
    if unreachable := [prompt for prompt, _ in probes if not reaches(prompt, key, threshold)]:
        return (f"{len(unreachable)} of the document's probes do not name its key words (e.g. {unreachable[0]!r}): "
                "a routed document answers only prompts that name its rare words")
    return None
