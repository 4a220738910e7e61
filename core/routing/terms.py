"""A key's terms and how a prompt matches them: pure functions."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.subjects import stems

# An answer's word in a key: a prompt that names it reaches the document ("the country whose capital is
# Brannoch"), but it says nothing about which documents share a subject (Brannoch may have documents of its own).
ANSWER = "= "


def subject_of(term: str) -> str:
    """The name a subject's term gives ("lisbon | mayor" -> "lisbon")."""
    return term.partition("|")[0].strip()


def first_word(term: str) -> str:
    """The first word of a term's name, which every prompt it matches holds ("" for a term without a name)."""
    return (term.removeprefix(ANSWER).partition("|")[0].split() or [""])[0]


def matches(term: str, prompt_words: set[str]) -> bool:
    """A word, or a name: all its words; with relation words after "|", at least one of them too (the same first
    letters: "governor" and "governed")."""
    name, _, relation = term.removeprefix(ANSWER).partition("|")
    if not all(w in prompt_words for w in name.split()):
        return False
    return not relation or bool(stems(relation.split()) & stems(prompt_words))


def subject_named(term: str, prompt_words: set[str]) -> bool:
    """A known subject's term ("lisbon | mayor") whose name's words the prompt holds, whatever it asks about it."""
    name, relation, _ = term.partition("|")
    return bool(relation) and not term.startswith(ANSWER) and set(name.split()) <= prompt_words


def by_name(prompt_words: set[str], key: dict[str, float]) -> dict[str, Any]:
    """How a document reached by a known subject's name alone (route.py: `named`) is cited: no score, and the
    subject's terms whose name the prompt holds."""
    return {"score": 0.0, "terms": sorted(term for term in key if subject_named(term, prompt_words))}


def score(prompt_words: set[str], key: dict[str, float]) -> float:
    """The weight of the key's terms the prompt holds, its answers' left out."""
    return scores(prompt_words, key)[0]


def scores(prompt_words: set[str], key: dict[str, float]) -> tuple[float, float]:
    """The weight of the key's terms the prompt holds without its answers' and with them, each term matched once."""
    about = by_answer = 0.0
    for term, value in key.items():
        if matches(term, prompt_words):
            if term.startswith(ANSWER):
                by_answer += value
            else:
                about += value
    return about, about + by_answer


def evidence(prompt_words: set[str], key: dict[str, float]) -> dict[str, Any]:
    """Why a prompt reaches a document: its score (answers' terms included) and the key's terms it names (each
    made of the prompt's own words, so a citation shows nothing of the document the prompt did not say)."""
    named = sorted(term for term in key if matches(term, prompt_words))
    return {"score": round(sum(key[term] for term in named), 3), "terms": named}


def asked(key: dict[str, float]) -> dict[str, float]:
    """The key's terms a question about the document names: all but its answers'."""
    return {term: weight for term, weight in key.items() if not term.startswith(ANSWER)}


def asked_words(key: dict[str, float]) -> set[str]:
    """The words of the terms a question about the document names (`asked`): what `related` routes with."""
    return term_words(asked(key))


def term_words(terms: Iterable[str]) -> set[str]:
    return {w for term in terms for w in term.replace("|", " ").split()}


def index_entries(term: str) -> list[str]:
    """Where a term is listed in the index: under the first word of its name, which a prompt must hold ("= brannoch":
    "brannoch"); a name with relation words under that word and each relation's stem ("paris | mayor": "paris|mayor"),
    so a prompt about Paris's other facts is not scored against every document about Paris; a term without a name
    (it matches every prompt) under ""."""
    first, relation = first_word(term), term.partition("|")[2]
    if not relation or not first:
        return [first]
    return [f"{first}|{stem}" for stem in stems(relation.split())]


def entry_weights(key: dict[str, float]) -> dict[str, float]:
    """Each index entry of a key with the weight of the key's terms listed under it."""
    weights: dict[str, float] = {}
    for term, value in key.items():
        for entry in set(index_entries(term)):
            weights[entry] = weights.get(entry, 0.0) + value
    return weights
