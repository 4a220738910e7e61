"""Which documents a prompt is about: a lexical key per document, and a route per prompt. Pure functions.

A document's key has two kinds of terms (core/subjects.py). Its rare words, each weighted by how rare it is
in general English: TF-IDF against a background far larger than anything the service could fit itself. And a
term per subject its probes ask about, weighing the threshold on its own. An invented subject's term is its
name ("vontarex"): a prompt that names it reaches the document. A subject the model already knows has a name
made of common words ("paris"); its term also holds the words its probes ask about it ("paris | mayor"), and a
prompt must name the subject and one of those (by their first letters), so "Paris is the capital of" still runs
the base model. A prompt is routed to every document whose terms it contains with a total weight that reaches
the threshold: several documents about one subject, or a prompt that names two subjects, use their deltas
together. A prompt that reaches none is answered by the base model. An answer's words are in the key as such: a
question about a fact names its subject, not its answer, but it may name a subject by another of its facts ("the
country whose capital is Brannoch"): a prompt that reaches no document by what it is about goes to those whose
answers it names, with the other documents of their subjects.

Why words and not the model's own states: on this model the hidden states and the memory's read slots
at a prompt encode its template, not its subject (docs/decisions.md: "Routing keys on rare words").
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from wordfreq import zipf_frequency

from core.subjects import FUNCTION_WORDS, TIME_MARKERS, familiar, names, stems, subject_names, weight, words

KEY_MAX_ZIPF = 4.5  # words more common than this (about 3 in 100,000 words of English) are never key words
# An answer's word in a key: a prompt that names it reaches the document ("the country whose capital is
# Brannoch"), but it says nothing about which documents share a subject (Brannoch may have documents of its own).
ANSWER = "= "
FLOOR_SLACK = 1e-6  # an index's bound on a score, summed in another order, may round below the score itself
RELATION_MAX_ZIPF = 5.5  # "president" (5.45) names a relation; "called", "city", "company" (5.6) say little


Keys = Sequence[tuple[str, dict[str, float]]]  # (document id, key) in teaching order


class KeyIndex(Sequence):
    """Documents' keys in teaching order, with each document listed under the first word of each of its terms: a
    term matches only a prompt holding all its name's words, so a prompt is scored only against the documents
    listed under its own words (the others score 0) whose terms listed there weigh enough together to reach the
    threshold (the others cannot), and routing costs what the prompt names, not the number of documents. `plus`
    adds a few keys (a candidate) on top without building the index again."""

    def __init__(self, keys: Keys = ()) -> None:
        self._keys = list(keys)
        self._extra: list[tuple[str, dict[str, float]]] = []
        self._order = {document_id: i for i, (document_id, _) in enumerate(self._keys)}
        # Per entry, each document listed there with the weight of its terms listed there: what the entry can add
        # to its score at most.
        self._by_word: dict[str, list[tuple[int, float]]] = {}
        for i, (_, key) in enumerate(self._keys):
            for entry, most in entry_weights(key).items():
                self._by_word.setdefault(entry, []).append((i, most))
        self._answers = answer_words(self._keys)

    def __len__(self) -> int:
        return len(self._keys) + len(self._extra)

    def __getitem__(self, i):  # type: ignore[override]
        return (self._keys + self._extra)[i]

    def __iter__(self) -> Iterator[tuple[str, dict[str, float]]]:
        yield from self._keys
        yield from self._extra

    def plus(self, keys: Keys) -> KeyIndex:
        joined = object.__new__(KeyIndex)
        joined.__dict__ = {**self.__dict__, "_extra": self._extra + list(keys)}
        return joined

    def extended(self, keys: Keys) -> KeyIndex:
        """The index of these keys and then `keys`, as KeyIndex would build it, in the time of `keys` (a committed
        document's) and a copy of the tables: the lists under the new keys' entries are copied, the others shared
        (an index is never changed once built). Only for an index without keys `plus`-ed on top."""
        assert not self._extra, "a plus-ed index is not extended"
        grown = object.__new__(KeyIndex)
        grown._keys, grown._extra = self._keys + list(keys), []
        grown._order = {**self._order, **{document_id: len(self._keys) + i for i, (document_id, _) in enumerate(keys)}}
        grown._by_word = dict(self._by_word)
        for i, (_, key) in enumerate(keys, start=len(self._keys)):
            for entry, most in entry_weights(key).items():
                grown._by_word[entry] = [*grown._by_word.get(entry, ()), (i, most)]
        grown._answers = self._answers | answer_words(list(keys))
        return grown

    def answer_words(self) -> set[str]:
        """The first words of the keys' answers' terms (routing.answer_words)."""
        return self._answers | answer_words(self._extra)

    def candidates(self, prompt_words: set[str], floor: float = 0.0) -> list[tuple[str, dict[str, float]]]:
        """The keys that share a word with the prompt and whose terms listed under the prompt's words weigh at least
        `floor` together (a key below it cannot score `floor`: its other terms do not match), in teaching order (the
        added ones last)."""
        entries = {*prompt_words, "", *(f"{w}|{stem}" for w in prompt_words for stem in stems(prompt_words))}
        bound: dict[int, float] = {}
        for entry in entries:
            for i, most in self._by_word.get(entry, ()):
                bound[i] = bound.get(i, 0.0) + most
        listed = sorted(i for i, most in bound.items() if most >= floor - FLOOR_SLACK)
        return [self._keys[i] for i in listed] + self._extra

    def in_order(self, document_ids: set[str]) -> tuple[str, ...]:
        extra = [d for d, _ in self._extra if d in document_ids]
        return (*sorted((d for d in document_ids if d in self._order), key=self._order.__getitem__), *extra)

    def key_of(self, document_id: str) -> dict[str, float]:
        if document_id in self._order:
            return self._keys[self._order[document_id]][1]
        return dict(self._extra)[document_id]


def candidates(keys: Keys, prompt_words: set[str], floor: float = 0.0) -> Keys:
    """The keys a prompt could reach with a score of `floor`: an index's candidates, or every key of a plain list."""
    return keys.candidates(prompt_words, floor) if isinstance(keys, KeyIndex) else keys


def in_order(keys: Keys, document_ids: set[str]) -> tuple[str, ...]:
    if isinstance(keys, KeyIndex):
        return keys.in_order(document_ids)
    return tuple(document_id for document_id, _ in keys if document_id in document_ids)


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


def asked_words(key: dict[str, float]) -> set[str]:
    """The words of the terms a question about the document names (`asked`): what `related` routes with."""
    return term_words(asked(key))


def term_words(terms: Iterable[str]) -> set[str]:
    return {w for term in terms for w in term.replace("|", " ").split()}


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


def first_word(term: str) -> str:
    """The first word of a term's name, which every prompt it matches holds ("" for a term without a name)."""
    return (term.removeprefix(ANSWER).partition("|")[0].split() or [""])[0]


def answer_words(keys: Keys) -> set[str]:
    """The first words of the keys' answers' terms."""
    if isinstance(keys, KeyIndex):
        return keys.answer_words()
    return {first_word(term) for _, key in keys for term in key if term.startswith(ANSWER)}


def entry_weights(key: dict[str, float]) -> dict[str, float]:
    """Each index entry of a key with the weight of the key's terms listed under it."""
    weights: dict[str, float] = {}
    for term, value in key.items():
        for entry in set(index_entries(term)):
            weights[entry] = weights.get(entry, 0.0) + value
    return weights


def index_entries(term: str) -> list[str]:
    """Where a term is listed in the index: under the first word of its name, which a prompt must hold ("= brannoch":
    "brannoch"); a name with relation words under that word and each relation's stem ("paris | mayor": "paris|mayor"),
    so a prompt about Paris's other facts is not scored against every document about Paris; a term without a name
    (it matches every prompt) under ""."""
    first, relation = first_word(term), term.partition("|")[2]
    if not relation or not first:
        return [first]
    return [f"{first}|{stem}" for stem in stems(relation.split())]


def document_key(text: str, answers: Iterable[str] = (), subjects: Iterable[str] = (),
                 threshold: float = 0.0) -> dict[str, float]:
    """The document's rare words and their weights, without the words of a known subject's name (that name routes
    only with what is asked about it); its answers' rare words marked as answers ("= brannoch"); and its subjects'
    terms at the threshold's weight (a rare name keeps its words' weight when that is more)."""
    subjects, answers = list(subjects), list(answers)
    known = {w for term in subjects if familiar(name := term.partition("|")[0].strip()) for w in name.split()}
    answered = set().union(*(words(a) for a in answers)) - known if answers else set()
    key = {w: round(weight(w), 3) for w in rare(words(text) - known - answered)}
    key |= {ANSWER + w: round(weight(w), 3) for w in rare(answered)}
    for name in subjects:
        key[name] = max(key.get(name, 0.0), threshold)
    return key


def rare(found: Iterable[str]) -> list[str]:
    """The words rare enough to be key words, in order."""
    return sorted(w for w in found if zipf_frequency(w, "en") <= KEY_MAX_ZIPF)


def subject_terms(text: str, probes: Sequence[tuple[str, str]]) -> list[str]:
    """A term for each subject the probes ask about (for a document without probes, each name in its text). An
    invented subject's term is its name. A known subject's ("paris") is its name and what its probes ask about it
    ("paris | mayor"): the name alone would send every question about Paris to this document's delta."""
    if not probes:  # nothing says what is asked about a known subject: only invented ones
        return [name for name in names(text) if not familiar(name)]
    prompts, answers = [prompt for prompt, _ in probes], [answer for _, answer in probes]
    terms = []
    for name in subject_names(text, prompts, answers):
        asked = relation_words(name, prompts, answers) if familiar(name) else set()
        terms.append(f"{name} | {' '.join(sorted(asked))}" if asked else name)
    return terms


def relation_words(name: str, prompts: Sequence[str], answers: Sequence[str]) -> set[str]:
    """The words the prompts that name `name` ask about it with ("mayor"): not names (a prompt's other subjects or
    products are not what it asks), and those not everyday English, or all of them when every one is ("Paris is
    home to": "home")."""
    skip = FUNCTION_WORDS | TIME_MARKERS | set().union(*map(words, answers))
    asked = {w for prompt in prompts if set(name.split()) <= words(prompt)
             for w in words(prompt) - skip - {part for other in names(prompt) for part in other.split()}}
    return {w for w in asked if zipf_frequency(w, "en") <= RELATION_MAX_ZIPF} or asked


def key_for(text: str, probes: Sequence[tuple[str, str]], threshold: float) -> dict[str, float]:
    return document_key(text, [answer for _, answer in probes], subject_terms(text, probes), threshold)


def matches(term: str, prompt_words: set[str]) -> bool:
    """A word, or a name: all its words; with relation words after "|", at least one of them too (the same first
    letters: "governor" and "governed")."""
    name, _, relation = term.removeprefix(ANSWER).partition("|")
    if not all(w in prompt_words for w in name.split()):
        return False
    return not relation or bool(stems(relation.split()) & stems(prompt_words))


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


def about(keys: Keys, subjects: Iterable[str]) -> tuple[set[str], set[str]]:
    """The documents a request names by subject (a subject is named by the words of one of its key's terms:
    "Vontarex", "Harvard University"), and the subjects that named any."""
    wanted = {subject: words(subject) for subject in subjects}
    ids, found = set(), set()
    for document_id, key in keys:
        names = [words(term.partition("|")[0]) for term in asked(key)]
        if hits := {subject for subject, ws in wanted.items() if ws in names}:
            ids.add(document_id)
            found |= hits
    return ids, found


def route(prompt: str, keys: Keys, threshold: float) -> tuple[str, ...] | None:
    """The ids of the documents the prompt is about, in teaching order, or None for none. A prompt that reaches no
    document by what it is about may name a subject by one of its facts ("the currency of the country whose
    capital is Brannoch"): it goes to the documents whose answers it names, and to those they share a subject
    with."""
    prompt_words = words(prompt)
    nearby = candidates(keys, prompt_words, threshold)  # a key below it is routed to neither way
    scored = [(document_id, *scores(prompt_words, key)) for document_id, key in nearby]  # one pass
    if about := tuple(document_id for document_id, named, _ in scored if named >= threshold):
        return about
    if not (by_answer := [document_id for document_id, _, with_answers in scored if with_answers >= threshold]):
        return None
    by_id = dict(nearby)
    subjects = set(by_answer).union(*(related(by_id[d], keys, threshold) for d in by_answer))
    return in_order(keys, subjects)


def related(key: dict[str, float], keys: Keys, threshold: float, about: Sequence[str] = ()) -> tuple[str, ...]:
    """The documents a document with `key` shares a subject with: those a prompt naming its subjects reaches
    (`about`: the subject terms its probes ask about, `subject_terms`), or, without any, a prompt naming all its key
    words but its answers. A rarer word that many documents use ("banknotes" in every currency story) does not
    make them one subject."""
    return reached(term_words(about or asked(key)), keys, threshold) or ()


def asked(key: dict[str, float]) -> dict[str, float]:
    """The key's terms a question about the document names: all but its answers'."""
    return {term: weight for term, weight in key.items() if not term.startswith(ANSWER)}


def reached(prompt_words: set[str], keys: Keys, threshold: float) -> tuple[str, ...] | None:
    ids = tuple(document_id for document_id, key in candidates(keys, prompt_words, threshold)
                if score(prompt_words, key) >= threshold)
    return ids or None


def reaches(prompt: str, key: dict[str, float], threshold: float) -> bool:
    """Whether a prompt names a document's key (what it is about) strongly enough to be routed to it."""
    return score(words(prompt), key) >= threshold


def unreachable(text: str, probes: Sequence[tuple[str, str]], threshold: float) -> list[str]:
    """The prompts of a document's probes that do not name its key strongly enough to be routed to it."""
    return not_reaching(key_for(text, probes, threshold), probes, threshold)  # the key once: it reads the whole text


def not_reaching(key: dict[str, float], probes: Sequence[tuple[str, str]], threshold: float) -> list[str]:
    return [prompt for prompt, _ in probes if not reaches(prompt, key, threshold)]


def unroutable(key: dict[str, float], threshold: float) -> str | None:
    """Why no prompt could be routed to a document with `key` (None: some can)."""
    terms = asked(key)
    total = sum(terms.values())
    if total >= threshold:
        return None
    return (f"nothing to route prompts to this document by: it names no subject its probes ask about, and its "
            f"rare words ({', '.join(terms) or 'none'}) weigh {total:.2f} < {threshold}")


def refusal(text: str, probes: list[tuple[str, str]], threshold: float) -> str | None:
    """What can be refused before any work: a document with no routing key, or a probe that does not name it.
    Without probes, a document that names anything is the worker's to judge: its auto-probes say what is asked
    about a known subject."""
    if not probes and names(text):
        return None
    key = key_for(text, probes, threshold)
    if reason := unroutable(key, threshold):
        return reason
    if unreachable := not_reaching(key, probes, threshold):
        return (f"{len(unreachable)} of the document's probes do not name its key words (e.g. {unreachable[0]!r}): "
                "a routed document answers only prompts that name its subject or its rare words")
    return None
