"""What a version holds: the documents its per-document methods route to (the framework's table, core/routing/), and
for each method that learned something along its lineage, the state its serving side composes from those versions'
deltas (the adapter: the last adapter; the memory: every row written, a later write of a row winning; the routed
method: where each document's delta is stored)."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from core import registry
from core.namespaces import SHARED, namespace_of, within
from core.probes import from_json
from core.routing.table import Table, compose
from core.scoring import Probe
from core.subjects import without_time_markers, words
from core.versions import VersionStore


@dataclass
class Knowledge:
    """What one version holds."""
    table: Table = field(default_factory=Table)  # the documents routed per document
    states: dict[str, Any] = field(default_factory=dict)  # method name -> its state; absent: it learned nothing

    def get(self, name: str) -> Any:
        return self.states.get(name)


def resolve(versions: VersionStore, version: int) -> Knowledge:
    lineage = versions.lineage(version)
    by_method: dict[str, list[dict[str, Any]]] = {}
    for manifest in lineage:
        by_method.setdefault(manifest["method"], []).append(manifest)
    table = compose(lineage)
    table.keys()  # the index of every document, built before a swap (outside its lock), not by a request
    return Knowledge(table, {name: registry.get(name).served.compose(manifests, versions.load_delta)
                             for name, manifests in by_method.items()})


def restored_by(versions: VersionStore, version: int) -> list[str]:
    """Documents that `version` holds and that a removal took out, on any lineage and at any time: serving
    `version` again would bring them back (a rollback to before the removal does not undo it)."""
    held = {d for m in learned_manifests(versions, version) for d in m["documents"]} if version else set()
    return sorted(versions.removed() & held)


def restoring(versions: VersionStore) -> set[int]:
    """Every version that `restored_by` names documents for (computed again only after the store changed)."""
    return versions.memo("restoring", lambda: _restoring(versions))


def _restoring(versions: VersionStore) -> set[int]:
    """Each manifest read once (not a lineage walk per version: linear in the number of versions). Only removed
    documents are followed down the versions, so a version that adds none shares its parent's (small) set."""
    removed = versions.removed()
    held: dict[int, frozenset[str]] = {0: frozenset()}
    unreadable = set()
    for version, manifest in versions.readable(versions.versions()[1:]):  # a parent's number is below its child's
        if manifest is None:  # a manifest a crash emptied: never offered
            unreadable.add(version)
            continue
        kept = held.get(manifest["parent"] or 0, frozenset())
        if manifest.get("removes"):
            held[version] = kept - {manifest["removes"]}
        else:
            held[version] = kept | added if (added := removed.intersection(manifest["documents"])) else kept
    return unreadable | {v for v, documents in held.items() if documents}


def learned_manifests(versions: VersionStore, version: int) -> list[dict[str, Any]]:
    """The manifests along the lineage whose documents still count (a later removal takes one out)."""
    lineage = versions.lineage(version)
    removed = {m["removes"] for m in lineage if m.get("removes")}
    return [m for m in lineage if not removed & set(m["documents"])]


S = TypeVar("S")


@dataclass(frozen=True)
class Fold(Generic[S]):
    """What a lineage gives, one manifest that counts at a time (`learned_manifests`)."""
    name: str
    start: Callable[[], S]  # version 0's
    step: Callable[[S, dict[str, Any]], None]  # one manifest more, in place
    copy: Callable[[S], S]
    # A removed document's part taken out, in place; None: a version that removes one is walked from version 1
    # (what the removed document did to the others' parts is not undone by taking its own out).
    removing: Callable[[S, str], None] | None = None


def folded(versions: VersionStore, fold: Fold[S], version: int) -> S:
    """`fold` over `version`'s lineage, read-only. Each version's is kept until a manifest is rewritten: a new
    version whose parent's is kept is its parent's with one step more, not a walk of every manifest of its lineage
    (docs/decisions.md: Every list of a lineage folded per version)."""
    rewrites = versions.rewrites()
    if (state := versions.kept((fold.name, version))) is not None:
        return state
    manifest = versions.manifest(version) if version else None
    parent = (fold.name, manifest["parent"] or 0) if manifest is not None else None
    gone = manifest.get("removes") if manifest is not None else None
    if parent is not None and (fold.removing or not gone) and (prior := versions.kept(parent)) is not None:
        state = fold.copy(prior)
        if gone and fold.removing:
            fold.removing(state, gone)
        fold.step(state, manifest)
    else:
        state = fold.start()
        for counted in learned_manifests(versions, version):
            fold.step(state, counted)
    versions.keep((fold.name, version), state, rewrites, instead_of=parent)
    return state


@dataclass(frozen=True)
class LearnedFact:
    """A probe the learned suite checks (asked in its document's namespace), the document and version that taught
    it."""
    probe: Probe
    document_id: str
    version: int

    @property
    def namespace(self) -> str:
        return self.probe.namespace


def _learn(facts: list[LearnedFact], manifest: dict[str, Any]) -> None:
    if retired := {(r["prompt"], r["answer"]) for r in manifest.get("replaces", [])}:  # rare: a pass over all
        facts[:] = [f for f in facts if (f.probe.prompt, f.probe.answer) not in retired
                    or f.namespace != namespace_of(manifest)]
    facts += [LearnedFact(p, manifest["documents"][0], manifest["version"])
              for p in from_json(manifest["probes"], namespace_of(manifest))]


LEARNED: Fold[list[LearnedFact]] = Fold("learned_facts", list, _learn, list)


def learned_facts(versions: VersionStore, version: int,
                  namespaces: frozenset[str] | None = None) -> list[LearnedFact]:
    """What the learned suite checks at `version`: every probe its lineage committed, less the documents a later
    removal took out and the facts a later document of their namespace replaced (its manifest's `replaces`). A fact
    leaves the suite only so. `namespaces`: only the facts of those (None: all)."""
    return [f for f in folded(versions, LEARNED, version) if within(f.namespace, namespaces)]


@dataclass
class Neighbours:
    """The neighbour prompts kept so far, numbered in the order recorded, each in its document's namespace."""
    kept: dict[int, Probe] = field(default_factory=dict)
    by_prompt: dict[str, list[int]] = field(default_factory=dict)  # prompt_key -> its numbers in `kept`
    numbered: int = 0
    own: set[str] = field(default_factory=set)  # the keys whose lists this one made: the others a copy shares

    def copy(self) -> Neighbours:
        self.own = set()  # its lists are shared from now on: copied before either changes one
        return Neighbours(dict(self.kept), dict(self.by_prompt), self.numbered)

    def step(self, manifest: dict[str, Any]) -> None:
        namespace = namespace_of(manifest)
        # A document asks anew the neighbours of its own namespace; a shared one, everyone's (none kept yet: nothing
        # to ask anew, and no prompt read).
        for asked in {prompt_key(p.prompt) for p in from_json(manifest["probes"])} if self.by_prompt else ():
            for entry in self.by_prompt.get(asked, []):
                if namespace in (SHARED, self.kept[entry].namespace):
                    del self.kept[entry]
            self.by_prompt[asked] = [entry for entry in self.by_prompt.get(asked, []) if entry in self.kept]
            self.own.add(asked)
        for neighbour in from_json(manifest.get("neighbours", []), namespace):
            self.kept[self.numbered] = neighbour
            key = prompt_key(neighbour.prompt)
            if key not in self.own:
                self.by_prompt[key] = [*self.by_prompt.get(key, [])]
                self.own.add(key)
            self.by_prompt[key].append(self.numbered)
            self.numbered += 1


NEIGHBOURS: Fold[Neighbours] = Fold("neighbours", Neighbours, Neighbours.step, Neighbours.copy)


def committed_neighbours(versions: VersionStore, version: int,
                         namespaces: frozenset[str] | None = None) -> list[Probe]:
    """The neighbour prompts the lineage recorded (workers/neighbours.py), less those of removed documents and those a
    later document's probe asks (what it teaches there is no longer the continuation to keep); those of documents
    in `namespaces` (None: all)."""
    return [n for n in folded(versions, NEIGHBOURS, version).kept.values() if within(n.namespace, namespaces)]


def superseded(replaced: list[LearnedFact], learned: list[LearnedFact]) -> list[str]:
    """The documents whose every learned fact is in `replaced`: nothing they taught is checked any more."""
    gone = {f.document_id for f in replaced}
    return sorted(d for d in gone if all(f in replaced for f in learned if f.document_id == d))


def prompt_key(prompt: str) -> str:
    """A prompt as `same_prompt` compares it: case and the time markers news adds aside."""
    return without_time_markers(prompt).casefold()


def same_prompt(a: str, b: str) -> bool:
    """Whether two prompts ask the same question: the same words, case and the time markers news adds aside."""
    return prompt_key(a) == prompt_key(b)


def replaced_by(own: list[Probe], supersedes: list[str], learned: list[LearnedFact], changed: Iterable[str] = (),
                about: set[str] = frozenset()) -> list[LearnedFact]:
    """The learned facts a new document replaces: those with a prompt one of its probes asks with another answer,
    those it names in `supersedes` (a document id: all its facts; else a probe prompt), and those about what it is
    about (`about`: its subjects' words) whose answer it says is no longer so (`changed`: "from Stockholm to Oslo")."""
    def replaced(fact: LearnedFact) -> bool:
        asked_again = any(same_prompt(p.prompt, fact.probe.prompt) and p.answer != fact.probe.answer for p in own)
        named = any(s == fact.document_id or same_prompt(s, fact.probe.prompt) for s in supersedes)
        told = fact.probe.answer in changed and bool(words(fact.probe.prompt) & about)
        return asked_again or named or told
    return [fact for fact in learned if replaced(fact)]
