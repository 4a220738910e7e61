"""Documents' keys indexed by their words, so routing costs what a prompt names, not the number of documents."""
from __future__ import annotations

from collections.abc import Iterator, Sequence

from core.routing.terms import ANSWER, entry_weights, first_word
from core.subjects import stems

FLOOR_SLACK = 1e-6  # an index's bound on a score, summed in another order, may round below the score itself

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
        self._stems_under = stems_under(self._by_word)
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
        added = stems_under(grown._by_word.keys() - self._by_word.keys())
        grown._stems_under = {**self._stems_under,
                              **{w: self._stems_under.get(w, frozenset()) | more for w, more in added.items()}}
        grown._answers = self._answers | answer_words(list(keys))
        return grown

    def answer_words(self) -> set[str]:
        """The first words of the keys' answers' terms (routing.answer_words)."""
        return self._answers | answer_words(self._extra)

    def candidates(self, prompt_words: set[str], floor: float = 0.0) -> list[tuple[str, dict[str, float]]]:
        """The keys that share a word with the prompt and whose terms listed under the prompt's words weigh at least
        `floor` together (a key below it cannot score `floor`: its other terms do not match), in teaching order (the
        added ones last)."""
        # A word's entries with relation stems are looked up only for the stems listed under it: every pair of the
        # prompt's words would cost the square of a long prompt's words.
        prompt_stems = stems(prompt_words)
        entries = {*prompt_words, "", *(f"{w}|{stem}" for w in prompt_words
                                        for stem in self._stems_under.get(w, frozenset()) & prompt_stems)}
        bound: dict[int, float] = {}
        for entry in entries:
            for i, most in self._by_word.get(entry, ()):
                bound[i] = bound.get(i, 0.0) + most
        listed = sorted(i for i, most in bound.items() if most >= floor - FLOOR_SLACK)
        return [self._keys[i] for i in listed] + self._extra

    def naming(self, names: set[str]) -> list[tuple[str, dict[str, float]]]:
        """The keys with a term whose name starts with one of `names` (with any relation), in teaching order."""
        entries = {*names, *(f"{w}|{stem}" for w in names for stem in self._stems_under.get(w, ()))}
        listed = sorted({i for entry in entries for i, _ in self._by_word.get(entry, ())})
        return [self._keys[i] for i in listed] + self._extra

    def in_order(self, document_ids: set[str]) -> tuple[str, ...]:
        extra = [d for d, _ in self._extra if d in document_ids]
        return (*sorted((d for d in document_ids if d in self._order), key=self._order.__getitem__), *extra)

    def key_of(self, document_id: str) -> dict[str, float]:
        if document_id in self._order:
            return self._keys[self._order[document_id]][1]
        return dict(self._extra)[document_id]


def stems_under(entries) -> dict[str, frozenset[str]]:
    """Per word, the relation stems it is listed with ("paris|mayor": "paris" -> {"mayor"})."""
    found: dict[str, set[str]] = {}
    for entry in entries:
        word, bar, stem = entry.partition("|")
        if bar:
            found.setdefault(word, set()).add(stem)
    return {word: frozenset(stems_of) for word, stems_of in found.items()}


def candidates(keys: Keys, prompt_words: set[str], floor: float = 0.0) -> Keys:
    """The keys a prompt could reach with a score of `floor`: an index's candidates, or every key of a plain list."""
    return keys.candidates(prompt_words, floor) if isinstance(keys, KeyIndex) else keys


def naming(keys: Keys, names: set[str]) -> Keys:
    """The keys that may hold a term named by `names`: an index's, or every key of a plain list."""
    return keys.naming(names) if isinstance(keys, KeyIndex) else keys


def in_order(keys: Keys, document_ids: set[str]) -> tuple[str, ...]:
    if isinstance(keys, KeyIndex):
        return keys.in_order(document_ids)
    return tuple(document_id for document_id, _ in keys if document_id in document_ids)


def answer_words(keys: Keys) -> set[str]:
    """The first words of the keys' answers' terms."""
    if isinstance(keys, KeyIndex):
        return keys.answer_words()
    return {first_word(term) for _, key in keys for term in key if term.startswith(ANSWER)}
