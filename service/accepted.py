"""Documents accepted but not learned yet, reached as context: a document's text can be read before the prompt from
the moment it is stored, while its delta trains (a paragraph's takes about a minute here). A prompt reaches such a
document as it would once learned: by the document's key (core/routing/), here made from its text and the probes it
was sent with, as the learner makes its key before it trains.

Only a request on the current version reaches them (an older version is what it was), and only one that routes
(a request that names its knowledge gets what it names); a document reached so is cited as context like a learned
one. A rejected, failed or erased document is no longer pending, so it is no longer reached.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from core.namespaces import namespace_of
from core.routing import KeyIndex, Keys, key_for
from core.routing.route import route
from core.routing.terms import evidence
from core.subjects import words


class Accepted:
    """The keys of the pending documents a prompt may reach, each made once (a document's text does not change
    while it is pending) and dropped once the document is no longer pending."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._keys: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()

    def keys(self, pending: Iterable[dict[str, Any]], namespaces: frozenset[str] | None,
             per_document: dict[str, bool]) -> Keys:
        """The keys of `pending` (records, oldest first) that a prompt within `namespaces` (None: all) may reach:
        documents to teach (not removals) of a method that routes per document."""
        records = [r for r in pending if not r.get("removes") and per_document.get(r.get("method") or "", False)]
        with self._lock:
            self._keys = {r["document_id"]: self._keys.get(r["document_id"]) or
                          key_for(r.get("text") or "", [(p["prompt"], p["answer"]) for p in r.get("probes") or []],
                                  self.threshold) for r in records}
            return [(r["document_id"], self._keys[r["document_id"]]) for r in records
                    if namespaces is None or namespace_of(r) in namespaces]

    def reached(self, prompt: str, keys: Keys) -> list[dict[str, Any]]:
        """The pending documents `prompt` is routed to, cited as a learned document is: id, score and terms."""
        if not keys:
            return []
        by_id = dict(keys)
        return [{"document_id": d, **evidence(words(prompt), by_id[d])}
                for d in route(prompt, KeyIndex(keys), self.threshold) or ()]
