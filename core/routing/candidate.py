"""Routing while a learner trains one document: the parent version's table, and once the candidate has begun, its
key on top. Which prompts the candidate may move (the gate scores only those again), how a probe is routed in the
candidate and in the parent, and what the candidate retires or a removal takes out. A document of a whole-version
method has no key: every prompt may move, and routes stay the parent's."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from core.namespaces import SHARED, reach, routed_for
from core.routing.index import KeyIndex
from core.routing.keys import not_reaching, reading_key, subject_terms, unroutable
from core.routing.route import changed, may_reroute, related, route, watched
from core.routing.table import Route, Table, Taught
from core.subjects import words


@dataclass
class Begun:
    """The document being trained with a per-document method: its id, method, key and the subjects it asks about."""
    document_id: str
    method: str
    key: dict[str, float]
    subjects: list[str] = field(default_factory=list)


class Candidate:
    def __init__(self, table: Table, threshold: float) -> None:
        self.table, self.threshold = table, threshold
        self.before = table.snapshot()  # the parent's documents, as routed before the candidate
        self.begun: Begun | None = None
        self.namespace, self.reach = SHARED, None  # the document's namespace and those it can change (None: all)
        self.per_document = False  # whether the run's method routes per document

    def start(self, namespace: str, per_document: bool) -> None:
        """A run of a document of `namespace` with a per-document method or a whole-version one."""
        self.namespace, self.reach, self.per_document = namespace, reach(namespace), per_document

    def begin(self, document_id: str, method: str, text: str, probes: list[tuple[str, str]],
              probes_made: bool = False) -> dict[str, float]:
        """A document of a per-document method: its key (and so its routes) from now on; returns the key.
        `probes_made`: its probes were made from its text (it was sent without any): its opening's subjects too."""
        self.begun = Begun(document_id, method, reading_key(text, probes, self.threshold, probes_made),
                           subject_terms(text, probes))
        return self.begun.key

    def refusal(self) -> str | None:
        """Why no prompt could be routed to the begun document (None: some can, or nothing is begun)."""
        return unroutable(self.begun.key, self.threshold) if self.begun else None

    def unreachable(self, probes: list[tuple[str, str]]) -> list[str]:
        """The prompts of the begun document's probes that could not reach it (its key, made once by `begin`)."""
        return not_reaching(self.begun.key, probes, self.threshold) if self.begun else []

    def retire(self, document_ids: list[str]) -> list[str]:
        """Stop routing to these documents (every fact they taught is replaced by the begun one); those retired."""
        if not self.per_document:  # a whole-version method cannot take one document out
            return []
        retired = [t.document_id for t in self.table.documents if t.document_id in document_ids]
        self.table.documents = [t for t in self.table.documents if t.document_id not in retired]
        return retired

    def remove(self, document_id: str, back: list[Taught]) -> None:
        """A removal: the document leaves the table and the documents it retired come `back`."""
        self.table.documents = [t for t in self.table.documents if t.document_id != document_id] + back

    def keys(self, namespaces: frozenset[str] | None) -> KeyIndex:
        """The keys of the documents in `namespaces` (None: all), the begun one's last."""
        begun = [(self.begun.document_id, self.begun.key)] if self.begun else []
        return self.table.keys(namespaces).plus(begun)

    def method_of(self, document_id: str) -> str | None:
        if self.begun and document_id == self.begun.document_id:
            return self.begun.method
        return self.table.method_of(document_id) or self.before.method_of(document_id)

    def route(self, prompt: str, namespace: str = SHARED) -> Route:
        return route(prompt, self.keys(routed_for(namespace, self.reach)), self.threshold)

    def parent_route(self, prompt: str, namespace: str = SHARED) -> Route:
        """The route as the parent version has it: the documents retired since in it and the candidate not."""
        return route(prompt, self.before.keys(routed_for(namespace, self.reach)), self.threshold)

    def training_route(self) -> Route:
        """What the begun document trains beside: the documents it shares a subject with, itself included (a prompt
        about the subject will have them all on)."""
        begun = self.begun
        return related(begun.key, self.keys(self.reach), self.threshold, begun.subjects) or (begun.document_id,)

    def affected(self, prompt: str, namespace: str = SHARED) -> bool:
        """Whether the candidate may answer `prompt` otherwise than the parent: any prompt for a whole-version method;
        for a per-document one, only those whose route it changed (they name the begun document, or one taken out or
        put back)."""
        if not self.per_document:
            return True
        view = routed_for(namespace, self.reach)
        return route(prompt, self.before.keys(view), self.threshold) != route(prompt, self.keys(view), self.threshold)

    def affected_among(self, asked: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """As `affected`, routing again only the prompts whose route may differ (may_reroute): those that name a
        changed document, and those routed by an answer. The gate's cost follows what the candidate changed, not the
        number of facts learned. Each namespace's prompts with the keys they are routed with."""
        if not self.per_document:
            return set(asked)
        by_view: dict[frozenset[str], list[tuple[str, str]]] = {}
        for prompt, namespace in asked:
            by_view.setdefault(routed_for(namespace, self.reach), []).append((prompt, namespace))
        moved = set()
        for view, pairs in by_view.items():
            before, keys = self.before.keys(view), self.keys(view)
            watch = watched(changed(before, keys), [before, keys], self.threshold)
            moved |= {(prompt, namespace) for prompt, namespace in pairs
                      if may_reroute(words(prompt), watch, keys, self.threshold)
                      and route(prompt, before, self.threshold) != route(prompt, keys, self.threshold)}
        return moved

    def committed(self, version: int) -> None:
        """The candidate is `version`: the begun document joins the table (last; taught again: moved last)."""
        if self.begun is not None:
            begun = self.begun
            entry = Taught(begun.document_id, begun.key, version, self.namespace, begun.method)
            if any(t.document_id == begun.document_id for t in self.table.documents):
                self.table.documents = [*(t for t in self.table.documents if t.document_id != begun.document_id),
                                        entry]
            else:
                self.table.extend([entry])
        self.settle()

    def settle(self) -> None:
        """No candidate: the table is what a version holds."""
        self.begun = None
        self.before = self.table.snapshot()

