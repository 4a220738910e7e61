"""What a learner holds between jobs: its methods on the model, the version they hold, and that version's probe scores
as routed for some namespaces.

A job from the version this learner committed last neither loads the lineage nor scores the unchanged probes again,
and a job after a rejection (the methods then hold no version) scores none of its parent's again. A learner that
starts reads the saved scores of its parent where they were saved under the same settings (workers/saved_scores.py).
"""
from __future__ import annotations

from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from core import registry
from core.namespaces import reach
from core.probes import GENERAL_TOKENS, ProbeSuites
from core.routing.candidate import Candidate
from core.scoring import Probe, greedy_continuations, score_probes
from core.settings import Settings
from core.state import Knowledge, LearnedFact, committed_neighbours, learned_facts, resolve
from core.training import UpdateMethod
from core.versions import VersionStore
from workers import saved_scores

Reach = frozenset[str] | None  # the namespaces a job routes for (None: all)
Lineage = tuple[list[LearnedFact], list[Probe]]


class Held:
    def __init__(self, settings: Settings, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 model_name: str, versions: VersionStore, suites: ProbeSuites) -> None:
        self.settings, self.model, self.tokenizer, self.model_name = settings, model, tokenizer, model_name
        self.versions, self.suites = versions, suites
        self.methods: dict[str, UpdateMethod] = {}  # built on first use, all on the same model
        self.candidate = Candidate(Knowledge().table, settings.routing_threshold)  # the loaded version's routing
        self.loaded: int | None = None  # the version the methods hold (None: none, or a candidate)
        self.scores: dict[Probe, float] = {}  # the probe scores of `scored`'s version as routed for its reach
        self.scored: tuple[int, Reach] | None = None
        self.reach: Reach = None  # the namespaces the job in hand routes for
        self._walked: tuple[tuple[int, Reach, int | None], Lineage] | None = None

    def method(self, name: str) -> UpdateMethod:
        """A registered method's training side, built on the learner's model on first use."""
        if name not in self.methods:
            self.methods[name] = registry.get(name).trainer.build(self.model, self.tokenizer, self.settings)
        return self.methods[name]

    def per_document(self) -> dict[str, bool]:
        """Each built method's kind: routed per document by the framework, or whole-version."""
        return {name: registry.get(name).per_document for name in self.methods}

    def load_state(self, state: Knowledge) -> None:
        """Every method's state as of one version (a method with state there is built first), and its routing."""
        for name in state.states:
            self.method(name)
        for name, method in self.methods.items():
            method.load(state.get(name))
        self.candidate = Candidate(state.table, self.settings.routing_threshold)

    def forget_loaded(self) -> None:
        """The methods no longer hold a committed version: the next job loads its parent again."""
        self.loaded = None
        for method in self.methods.values():
            method.activate(None)

    def hold(self, parent: int, namespace: str, per_document: bool = False) -> bool:
        """The suites made, `parent`'s state on every method as seen from `namespace` (by a run of a per-document
        method, or not), and its saved scores as routed there; True when none were saved (every probe a run does not
        defer is scored anew)."""
        self._ensure_suites()
        if self.loaded != parent:
            self.load_state(resolve(self.versions, parent))
            self.loaded = parent
        self.reach = reach(namespace)
        if self.scored != (parent, self.reach):  # scores of another version, or routed for other namespaces
            self.scored, self.scores = (parent, self.reach), self._read_scores(parent)
        self.candidate.start(namespace, per_document)
        return not self.scores

    def committed(self, version: int, scores: dict[Probe, float]) -> None:
        """The candidate was committed as `version`: the methods and the routing hold it, and its scores are `scores`
        (saved)."""
        self.candidate.committed(version)
        self.loaded, self.scores, self.scored = version, scores, (version, self.reach)
        self.write_scores(version)

    def rebased(self, version: int, onto: int, moved: dict[Probe, float]) -> None:
        """The candidate was committed as `version` on `onto`, not on the version it was trained from: the methods
        hold it no more. Its scores are `onto`'s, where they were saved, with the candidate's of the probes it moved
        (`moved`): routed alike from either version (workers/stages/rebase.py), and the rest it cannot move. Saved,
        so the next job from `version` does not score them again."""
        self.forget_loaded()
        if saved := self._read_scores(onto):
            self.scores, self.scored = {**saved, **moved}, (version, self.reach)
            self.write_scores(version)

    def _ensure_suites(self) -> None:
        """The NF suite and the general prompts' continuations, made on version 0 the first time."""
        if self.suites.nf_suite() is None or self.suites.general() is None:
            self.forget_loaded()
            self.load_state(Knowledge())
            self.suites.ensure_nf_suite(self.model_name,
                                        lambda probes: score_probes(self.model, self.tokenizer, probes))
            self.suites.ensure_general(self.model_name, lambda prompts: greedy_continuations(
                self.model, self.tokenizer, prompts, GENERAL_TOKENS))

    def lineage(self, version: int) -> Lineage:
        """The learned facts and neighbour prompts along `version`'s lineage, of the namespaces the job in hand routes
        for: picked once per version and namespaces (of the lineage's, folded per version: core/state.py), not once
        by the commit that saves the version's scores and again by the next job from it. Picked again once a manifest
        was rewritten (an erasure scrubs a removed document's)."""
        walk = (version, self.reach, self.versions.rewrites())
        if self._walked is None or self._walked[0] != walk:
            self._walked = (walk, (learned_facts(self.versions, version, self.reach),
                                   committed_neighbours(self.versions, version, self.reach)))
        return self._walked[1]

    def lineage_suites(self, version: int) -> tuple[dict[str, list[Probe]], str]:
        """The suites whose scores are saved for `version`, as routed for the job in hand's namespaces, and what
        they hold for (workers/saved_scores.py)."""
        facts, neighbours = self.lineage(version)
        suites = {"nf": self.suites.nf_probes(), "learned": [f.probe for f in facts], "neighbours": neighbours}
        # What routes and answers a probe: each method's settings, and the routing threshold.
        settings: dict[str, Any] = {spec.name: self.settings.method_config(spec.name).model_dump()
                                    for spec in registry.registered()}
        settings["routing_threshold"] = self.settings.routing_threshold
        return suites, saved_scores.fingerprint(version, self.reach, self.model_name, settings,
                                                [f.document_id for f in facts], suites)

    def _read_scores(self, version: int) -> dict[Probe, float]:
        suites, check = self.lineage_suites(version)
        return saved_scores.from_saved(self.suites.saved_scores(), check, suites)

    def write_scores(self, version: int, lineage: tuple[dict[str, list[Probe]], str] | None = None) -> None:
        """`lineage`: what lineage_suites(version) gave, where the caller has it (the lineage is not walked again)."""
        suites, check = lineage or self.lineage_suites(version)
        self.suites.save_scores(saved_scores.to_saved(check, suites, self.scores))
