"""Which document a prompt is about: a lexical key per document, and a route per prompt. Pure functions.

A document's key is its rare words, each weighted by how rare it is in general English (word frequency
from the wordfreq package: Zipf scale, 7.7 for "the", 0 for a word it has never seen). This is TF-IDF
against a background, with a background far larger than anything the service could fit itself. A
prompt is routed to the document whose key words it contains with the largest total weight, if that
weight reaches the threshold; otherwise to none, and the base model answers. Answers are left out of
the key: a question about a fact names its subject, not its answer.

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


def route(prompt: str, keys: Sequence[tuple[str, dict[str, float]]], threshold: float) -> str | None:
    """The id of the document the prompt is about, or None. `keys` in teaching order: of equal scores the
    later document wins (it is the newer word on its subject)."""
    prompt_words = words(prompt)
    best, best_score = None, threshold
    for document_id, key in keys:
        s = score(prompt_words, key)
        if s >= best_score:
            best, best_score = document_id, s
    return best
