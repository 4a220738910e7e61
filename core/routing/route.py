"""A prompt's route: the documents it is about, by their keys; and which prompts' routes two sets of keys may differ
on."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from core.routing.index import Keys, candidates, in_order, naming
from core.routing.terms import (
    ANSWER,
    asked,
    asked_words,
    first_word,
    score,
    scores,
    subject_named,
    subject_of,
    term_words,
)
from core.subjects import words

# The most documents one prompt is routed to: a prompt naming hundreds of subjects gets the newest this many. Every
# one is a delta read and applied on every decoding step of the prompt's row, and up to this many per row stay in
# memory beside the resident ones (RoutedSettings.resident) while the row decodes.
MAX_ROUTE = 64


def route(prompt: str, keys: Keys, threshold: float) -> tuple[str, ...] | None:
    """The ids of the documents the prompt is about, in teaching order (the newest MAX_ROUTE), or None for none. A
    prompt that reaches no document by what it is about may name a subject by one of its facts ("the currency of
    the country whose capital is Brannoch"): it goes to the documents whose answers it names, and to those they
    share a subject with."""
    prompt_words = words(prompt)
    nearby = candidates(keys, prompt_words, threshold)  # a key below it is routed to neither way
    scored = [(document_id, *scores(prompt_words, key)) for document_id, key in nearby]  # one pass
    if about := tuple(document_id for document_id, named, _ in scored if named >= threshold):
        return about[-MAX_ROUTE:]
    if not (by_answer := [document_id for document_id, _, with_answers in scored if with_answers >= threshold]):
        return None
    by_id = dict(nearby)
    subjects = set(by_answer).union(*(related(by_id[d], keys, threshold) for d in by_answer))
    return in_order(keys, subjects)[-MAX_ROUTE:]


def related(key: dict[str, float], keys: Keys, threshold: float, about: Sequence[str] = ()) -> tuple[str, ...]:
    """The documents a document with `key` shares a subject with: those a prompt naming its subjects reaches
    (`about`: the subject terms its probes ask about, `subject_terms`), or, without any, a prompt naming all its key
    words but its answers. A rarer word that many documents use ("banknotes" in every currency story) does not
    make them one subject."""
    return reached(term_words(about or asked(key)), keys, threshold) or ()


def reached(prompt_words: set[str], keys: Keys, threshold: float) -> tuple[str, ...] | None:
    ids = tuple(document_id for document_id, key in candidates(keys, prompt_words, threshold)
                if score(prompt_words, key) >= threshold)
    return ids or None


def reaches(prompt: str, key: dict[str, float], threshold: float) -> bool:
    """Whether a prompt names a document's key (what it is about) strongly enough to be routed to it."""
    return score(words(prompt), key) >= threshold


def about(keys: Keys, subjects: Iterable[str]) -> tuple[set[str], set[str]]:
    """The documents a request names by subject (a subject is named by the words of one of its key's terms:
    "Vontarex", "Harvard University"), and the subjects that named any."""
    wanted = {subject: words(subject) for subject in subjects}
    ids, found = set(), set()
    # Only the keys listed under the subjects' words can hold a term named by them: not a pass over every key.
    for document_id, key in naming(keys, set().union(*wanted.values())):
        names = [words(subject_of(term)) for term in asked(key)]
        if hits := {subject for subject, ws in wanted.items() if ws in names}:
            ids.add(document_id)
            found |= hits
    return ids, found


def named(prompt: str, keys: Keys, most: int) -> tuple[str, ...]:
    """The newest `most` documents about a known subject whose name the prompt holds, what is asked about it or not
    ("who runs lisbon now?" and the document keyed "lisbon | mayor"), in teaching order: what a prompt that reaches
    no document by its key may read as context. A delta runs only on what its key asks; a text read before the
    prompt answers any question about its subject, as retrieval would."""
    prompt_words = words(prompt)
    ids = {d for d, key in naming(keys, prompt_words) if any(subject_named(term, prompt_words) for term in key)}
    return in_order(keys, ids)[-most:] if most else ()


def changed(before: Keys, after: Keys) -> Keys:
    """The keys of the documents in only one of `before` and `after` (or with another key in each)."""
    old, new = dict(before), dict(after)
    return [(d, key) for d, key in old.items() if d not in new] + \
        [(d, key) for d, key in new.items() if (was := old.get(d)) is not key and was != key]


class Watched(NamedTuple):
    """The words a prompt's route may differ by between two sets of keys (`watched`); None: any prompt's may."""
    names: set[str] | None  # the first words of the changed keys' terms (None: a term without a name)
    answers: set[str] | None  # the first words of the answers of the documents a changed one is related to
    changed: tuple[dict[str, float], ...] = ()  # the changed keys


def watched(changed_keys: Keys, keys: Iterable[Keys], threshold: float) -> Watched:
    """What `may_reroute` looks for, between two sets of keys (`keys`) that differ by `changed_keys`. The answers:
    those of the documents a changed one is related to (`related`: a prompt naming their subject's words reaches
    it); a prompt about no document that names no such answer is routed to no changed document in either set."""
    names = {first_word(term) for _, key in changed_keys for term in key}
    if "" in names:
        return Watched(None, None)
    changed = tuple(key for _, key in changed_keys)
    # Each key once, though both sets hold most of them (the same objects); a document with another key in each
    # set is looked at with both. A subject that shares a word with a changed key is scored on it: a common word
    # ("founded") is in thousands of subjects, few of which reach the changed document.
    unique = {(document_id, id(key)): key for each in keys for document_id, key in each}
    answers = set()
    for key in unique.values():
        if not names.isdisjoint(subject := asked_words(key)) and \
                any(score(subject, each) >= threshold for each in changed):
            answers |= {first_word(term) for term in key if term.startswith(ANSWER)}
    return Watched(names, None if "" in answers else answers, changed)


def may_reroute(prompt_words: set[str], watch: Watched, keys: Keys, threshold: float) -> bool:
    """Whether a prompt's route may differ between two sets of keys (`keys`: either one). A changed route takes in
    a document only one set holds: the prompt names enough of its terms to reach it (their answers' counted),
    and so the first word of one; or the prompt is about no document (then the same in both sets) and names the
    answer of one that shares a subject with the changed one ("the country whose capital is Brannoch"). Neither:
    the route is the same, not computed."""
    if watch.names is None:
        return True
    if not watch.names.isdisjoint(prompt_words) and \
            any(scores(prompt_words, key)[1] >= threshold for key in watch.changed):
        return True
    if watch.answers is not None and watch.answers.isdisjoint(prompt_words):
        return False
    return reached(prompt_words, keys, threshold) is None
