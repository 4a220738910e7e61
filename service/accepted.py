"""Documents accepted but not learned yet, reached as context: a document's text can be read before the prompt from
the moment it is stored, while its delta trains (a paragraph's takes about a minute here). A prompt reaches such a
document as it would once learned: by the document's key (core/routing/), here made from its text and the probes it
was sent with, as the learner makes its key before it trains, and for a document sent without probes, with a term
for each known subject its opening sentence names (`reading_key`); where it reaches none so, by a known subject's
name alone, as a learned document is read (`named`).

Only a request on the current version reaches them (an older version is what it was), and only one that routes
(a request that names its knowledge gets what it names); a document reached so is cited as context like a learned
one. A rejected, failed or erased document is no longer pending, so it is no longer reached.
"""
from __future__ import annotations

import threading
from contextlib import suppress
from typing import Any

from core.documents import DocumentStore, UnknownDocument
from core.namespaces import namespace_of
from core.routing import KeyIndex, Keys, by_name, evidence, named, reading_key, route
from core.subjects import words


class Accepted:
    """The keys of the pending documents a prompt may reach. Each pending record is read once, when it is first
    seen (its text does not change while it is pending), and its key dropped once it is no longer pending: a request
    reads the pending ids, not every pending record, and the index of their keys is made again only when they
    change (every request that may read context asks, `auto`'s by default)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._seen: dict[str, tuple[str, dict[str, float] | None]] = {}  # id -> (namespace, key; None: unreachable)
        self._indexed: tuple[tuple[str, ...], KeyIndex] | None = None  # the last keys' ids and their index
        self._lock = threading.Lock()

    def keys(self, documents: DocumentStore, namespaces: frozenset[str] | None, per_document: dict[str, bool]) -> Keys:
        """The keys of the pending documents that a prompt within `namespaces` (None: all) may reach, oldest first:
        documents to teach (not removals) of a method that routes per document."""
        with self._lock:
            seen = {}
            for document_id in documents.pending_ids():
                if (known := self._seen.get(document_id)) is None:
                    with suppress(UnknownDocument):  # erased since the ids were read
                        known = self.first_seen(documents.get(document_id), per_document)
                if known is not None:
                    seen[document_id] = known
            self._seen = seen
        return [(d, key) for d, (namespace, key) in seen.items()
                if key is not None and (namespaces is None or namespace in namespaces)]

    def first_seen(self, record: dict[str, Any], per_document: dict[str, bool]) -> tuple[str, dict[str, float] | None]:
        """A pending record's namespace and key (None for a removal, or a document of a whole-version method)."""
        if record.get("removes") or not per_document.get(record.get("method") or "", False):
            return namespace_of(record), None
        probes = [(p["prompt"], p["answer"]) for p in record.get("probes") or []]
        return namespace_of(record), reading_key(record.get("text") or "", probes, self.threshold)

    def _index(self, keys: Keys) -> KeyIndex:
        """The index of `keys`: a pending document's key does not change, so its ids say which index it is."""
        ids = tuple(d for d, _ in keys)
        with self._lock:
            if self._indexed is None or self._indexed[0] != ids:
                self._indexed = (ids, KeyIndex(keys))
            return self._indexed[1]

    def reached(self, prompt: str, keys: Keys, most: int, by_subject: bool = True) -> list[dict[str, Any]]:
        """The pending documents `prompt` is routed to, cited as a learned document is: id, score and terms; where
        it is routed to none (and `by_subject`), the newest `most` about a known subject whose name it holds
        (core/routing: `named`)."""
        if not keys:
            return []
        index, prompt_words = self._index(keys), words(prompt)
        if routed := route(prompt, index, self.threshold):
            return [{"document_id": d, **evidence(prompt_words, index.key_of(d))} for d in routed]
        if not by_subject:
            return []
        return [{"document_id": d, **by_name(prompt_words, index.key_of(d))} for d in named(prompt, index, most)]
