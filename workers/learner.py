"""Learning one document, as a pipeline of named steps: prepare, weigh, train, then evaluate and commit or reject.

Updates are strictly sequential: a candidate names the version it was trained from, and the store
refuses the commit if another version became current meanwhile; the job then runs again from the new
current version. A removal (DELETE /documents/{id}, workers/removal.py) is a job too: it shares prepare and
the evaluate-and-commit tail, with the method's `remove` in place of weigh and train. The document's status
moves only through the store's `move` (core/lifecycle.py); the weigh step's work is in workers/weigher.py.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any

from filelock import FileLock

import methods  # noqa: F401  (registers every method folder)
from core import erasure, faults, registry
from core.documents import DocumentStore
from core.lifecycle import FINAL, Status, after_failed_attempt
from core.memory import map_large_blocks
from core.model.loader import LoadedModel, load_model
from core.namespaces import SHARED, namespace_of, reach
from core.neighbours import familiar_subjects, neighbour_prompts
from core.probes import GENERAL_TOKENS, ProbeSuites, drifted, from_json, to_json
from core.scoring import Probe, accuracy, greedy_continuations, score_probes
from core.settings import Settings
from core.state import (
    KnowledgeState,
    LearnedFact,
    committed_neighbours,
    learned_facts,
    replaced_by,
    resolve,
    same_prompt,
    superseded,
)
from core.training import Example, UpdateMethod
from core.versions import AlreadyCommitted, ParentMoved, VersionStore
from workers import gate, removal, saved_scores
from workers.run import RetryAfterRejection, Run
from workers.weigher import Weigher
from workers.yielding import YieldToServing

log = logging.getLogger(__name__)

MAX_PARENT_RETRIES = 3
SCORE_BATCH = 32  # probes scored in one forward pass


def unscored(suites: dict[str, list[Probe]], scores: dict[Probe, float], deferred: bool) -> dict[Probe, None]:
    """A deferred run's learned facts and neighbour prompts that have no score yet (none for a run not deferred), in
    the suites' order (scored in batches in that order, as any run scores them)."""
    return dict.fromkeys(p for name in gate.DEFERRABLE for p in suites[name] if p not in scores) if deferred else {}


class Learner:
    def __init__(self, settings: Settings, loaded: LoadedModel | None = None,
                 publish: Callable[[int], None] | None = None, busy: Callable[[], bool] | None = None) -> None:
        self.settings = settings
        # Rests between training steps and after each phase of a job while the API of this process decodes
        # (embedded: one machine for both).
        self.rest = YieldToServing(settings.learn_share_while_serving, busy or (lambda: False))
        loaded = loaded or load_model(settings)
        self.model, self.tokenizer, self.model_name = loaded.model, loaded.tokenizer, loaded.name
        self.methods: dict[str, UpdateMethod] = {}  # built on first use, all on the same model
        root = settings.data_dir
        self.documents = DocumentStore(root, settings.database_url)
        self.versions = VersionStore(root / "versions")
        self.suites = ProbeSuites(root / "probes")
        self.publish = publish or (lambda version: None)
        self.lease = FileLock(str(root / "learner.lock"))
        self.weigher = Weigher(settings, self.model, self.tokenizer, self.model_name, self.method)
        self._last_scores: dict[Probe, float] = {}
        self._sliced = [0.0, 0.0]  # within the phase in hand: the work rested for slice by slice, and those rests
        # What the methods hold now, and the probe scores of a version as routed for some namespaces: a job from
        # the version this learner committed last neither loads the lineage nor scores the unchanged probes again,
        # and a job after a rejection (the methods then hold no version) scores none of its parent's again.
        self._loaded: int | None = None
        self._scores: dict[Probe, float] = {}
        self._scored: tuple[int, frozenset[str] | None] | None = None  # (version, reach) of `_scores`
        self._reach: frozenset[str] | None = None  # the namespaces the job in hand routes for (None: all)
        self._walked: tuple[tuple[int, frozenset[str] | None, int | None], list[LearnedFact], list[Probe]] | None = None
        map_large_blocks()  # a long document's steps would otherwise leave their transients in RSS

    # -- the job ---------------------------------------------------------------------------------
    def learn(self, document_id: str) -> Status:
        """Run the job for one document; returns its final status. One learner at a time per data folder holds
        the lease: a second worker waits for it, then finds the document finished or trains from the version
        the first one committed (training in parallel would only be thrown away when the parent moves)."""
        with self.lease:
            return self._learn_once(document_id)

    def _learn_once(self, document_id: str) -> Status:
        record = self.documents.get(document_id)
        if record["status"] in FINAL:
            return Status(record["status"])
        record = self.documents.move(document_id, Status.TRAINING, attempts=record["attempts"] + 1, error=None)
        try:
            return self._from_current(record)
        except Exception as exc:
            self.forget_loaded()  # the methods may hold a half-trained candidate
            self._attempt_failed(document_id, record["attempts"], exc)
            raise

    def _from_current(self, record: dict[str, Any]) -> Status:
        """Learn (or remove) from the current version, again from the new one when the parent moved meanwhile."""
        document_id = record["document_id"]
        for _ in range(MAX_PARENT_RETRIES):
            try:
                parent = self.versions.current()
                if (held := self.versions.holding(document_id, parent)) is not None:
                    raise AlreadyCommitted(document_id, held)
                if record.get("removes"):
                    return removal.remove(self, parent, record)
                return self._learn(parent, record)
            except ParentMoved as moved:
                log.warning("document %s: %s; training again", document_id, moved)
                self.documents.move(document_id, Status.TRAINING)
            except AlreadyCommitted as done:  # a retried job whose commit happened: only the record missed it
                self.forget_loaded()
                if record.get("removes"):
                    erasure.erase(self.documents, self.versions, record["removes"], done.version)
                self.documents.move(document_id, Status.COMMITTED, version=done.version)
                return Status.COMMITTED
        raise RuntimeError(f"the current version kept moving during {MAX_PARENT_RETRIES} attempts")

    def _attempt_failed(self, document_id: str, attempts: int, exc: Exception) -> None:
        """Queued again while retries are left, else failed. A record the attempt already made final keeps its
        status (committed, then announcing the version failed): the version holds the document either way."""
        if self.documents.get(document_id)["status"] in FINAL:
            return
        self.documents.move(document_id, after_failed_attempt(attempts, self.settings.job_retries),
                            error=f"{type(exc).__name__}: {exc}")

    def _learn(self, parent: int, record: dict[str, Any]) -> Status:
        own = self._own_probes(record)
        try:
            return self._attempt(parent, record, own)
        except RetryAfterRejection as retry:  # a rejection is not the end: once more, as its reason suggests
            log.warning("document %s: rejected (%s); trying again: %s", record["document_id"],
                        retry.first_gate["reason"], retry.plan.why)
            self.documents.move(record["document_id"], Status.TRAINING)
            return self._attempt(parent, record, own, retry)

    def _attempt(self, parent: int, record: dict[str, Any], own: list[Probe],
                 retry: RetryAfterRejection | None = None) -> Status:
        run = self.prepare(parent, record, record["method"], own=own)
        self.rest_after_phase(run, "score_before_s")
        pairs = [(p.prompt, p.answer) for p in own]
        run.method.begin(run.doc_id, record["text"], pairs)
        if reason := run.method.refusal():
            return self.reject(run, reason)
        if run.superseded and (retired := run.method.retire(run.superseded)):
            run.fields["retires"] = retired  # what those documents taught is no longer served
        if unreachable := run.method.unreachable(record["text"], pairs):
            return self.reject(run, f"{len(unreachable)} of the document's probes cannot reach what it teaches with "
                                    f"method {run.method.name!r} (e.g. {unreachable[0]!r}): a routed document "
                                    "answers only prompts that name its subject or its rare words")
        self.add_neighbours(run, own)
        self.rest_after_phase(run, "neighbours_s")
        self.score_deferred(run)
        self.rest_after_phase(run, "score_moved_s")
        clock = time.perf_counter()
        examples = self.weigh(run)
        run.timings["weigh_s"] = time.perf_counter() - clock
        self.rest_after_phase(run, "weigh_s")
        self.train(run, examples, own, plan=retry.plan if retry else None)
        if retry:
            run.fields["retried"] = {"first_gate": retry.first_gate, "first_training": retry.first_training,
                                     "plan": retry.plan.why}
        return self.finish(run, probes=to_json(own), may_retry=retry is None)

    def rest_after_phase(self, run: Run, phase: str) -> None:
        """A rest after a phase of the job (yielding to serving, as between training steps), on the record. A phase
        that rested after each slice of its work (`_rest_after_slice`) rests now for the rest of it; its timing is
        its work, the rests left out."""
        if phase in run.timings:
            (work, rests), self._sliced = self._sliced, [0.0, 0.0]
            run.timings[phase] -= rests
            rested = rests + self.rest(max(0.0, run.timings[phase] - work))
            run.timings["rested_s"] = run.timings.get("rested_s", 0.0) + rested

    def _rest_after_slice(self, worked_s: float) -> None:
        """A rest within a phase, after one slice of it (a batch of probes scored): a long phase yields as often as
        training does, not once at its end."""
        self._sliced = [self._sliced[0] + worked_s, self._sliced[1] + self.rest(worked_s)]

    def _own_probes(self, record: dict[str, Any]) -> list[Probe]:
        """The document's probes; for one sent without any, those made from its text, kept on the record."""
        if own := from_json(record["probes"], namespace_of(record)):
            return own
        clock = time.perf_counter()
        made = self.weigher.auto_probes(record)
        self.rest(time.perf_counter() - clock)  # phi read the text: yield to serving as after any phase
        if made is None:
            return []
        self.documents.update(record["document_id"], auto_probes=to_json(made))
        return made

    # -- the steps -------------------------------------------------------------------------------
    def prepare(self, parent: int, record: dict[str, Any], name: str, own: list[Probe] = (),
                learned: list[Probe] | None = None, may_defer: bool = True) -> Run:
        """The parent's state on every method, the suites to gate on, and their scores before training. A learner
        without the parent's saved scores (a worker on a store whose scores were saved under other settings, or
        never) defers, where `may_defer` and no tolerance needs every share exact: its learned facts and neighbour
        prompts are scored once the candidate has begun, only those it may move (score_deferred), not all of them
        now (48 ms a probe: 8 minutes at 10,000 documents)."""
        method = self.method(name)
        clock, self._sliced = time.perf_counter(), [0.0, 0.0]
        # The document's namespace: it is gated on the prompts of the namespaces it can change answers in, routed as
        # they are asked there (a tenant's document cannot move, replace or erode another tenant's facts).
        namespace = namespace_of(record)
        fresh = self._hold(parent, namespace)
        replaced: list[LearnedFact] = []
        facts: list[LearnedFact] = []
        if learned is None:  # a document's run: the facts of its namespace it replaces leave the suite it is gated on
            facts = self._lineage(parent)[0]
            replaced = replaced_by(list(own), record.get("supersedes") or [],
                                   [f for f in facts if f.namespace == namespace])
            learned = [f.probe for f in facts if f not in replaced]
        # A known subject's neighbour prompts recorded along the lineage, less those this document's probes ask (it
        # teaches something there); its own are added once the method knows which prompts it can move.
        neighbours = [n for n in self._lineage(parent)[1] if not any(same_prompt(n.prompt, p.prompt) for p in own)]
        suites = {"nf": self.suites.nf_probes(), "learned": learned, "must_keep": self.suites.must_keep(),
                  "own": list(own), "neighbours": neighbours}
        left_out = unscored(suites, self._scores, may_defer and self._deferrable())
        run = Run(record, parent, method, suites, self.score(suites, self._scores, left_out), deferred=bool(left_out))
        if replaced:
            run.fields["replaces"] = [{"prompt": f.probe.prompt, "answer": f.probe.answer, "document_id": f.document_id}
                                      for f in replaced]
            run.superseded = superseded(replaced, facts)
        self._scores = self._last_scores  # the parent's scores, every probe of the suites not deferred included
        if fresh:  # a learner that starts saves what it scored: the next one need not score it again
            self._write_scores(parent)
        run.timings["score_before_s"] = time.perf_counter() - clock
        return run

    def _deferrable(self) -> bool:
        """Whether runs may defer scoring the learned facts and neighbour prompts (prepare): with no tolerance, the
        gate's decision needs only the scores of those the candidate may move."""
        return self.settings.learned_tolerance == 0 and self.settings.neighbour_tolerance == 0

    def _hold(self, parent: int, namespace: str) -> bool:
        """The suites made, `parent`'s state on every method as seen from `namespace`, and its saved scores as routed
        there; True when none were saved (every probe a run does not defer is scored anew)."""
        self._ensure_suites()
        if self._loaded != parent:
            self.load_state(resolve(self.versions, parent))
            self._loaded = parent
        self._reach = reach(namespace)
        if self._scored != (parent, self._reach):  # scores of another version, or routed for other namespaces
            self._scored, self._scores = (parent, self._reach), self._read_scores(parent)
        for each in self.methods.values():
            each.view(namespace)
        return not self._scores

    def warm(self) -> None:
        """Before any document: what a first job would find missing, made now. The default method built, the current
        version loaded, and its suites' scores as a shared document's job routes them, read from the saved file or
        scored and saved: where runs may defer, only those no run defers (the NF suite), as a job would. The
        embedded learner does it right after start, at idle priority (workers/job.warm_learner), so a first document
        under load starts where any later one does."""
        with self.lease:
            parent = self.versions.current()
            self.method(self.settings.method)
            if self._hold(parent, SHARED):
                lineage = self._lineage_suites(parent)
                suites = {**lineage[0], "must_keep": self.suites.must_keep(), "own": []}
                self.score(suites, self._scores, unscored(suites, self._scores, self._deferrable()))
                self._scores = self._last_scores
                self._write_scores(parent, lineage)

    def weigh(self, run: Run) -> list[Example]:
        """The document's training examples, with its weighting's most-weighted tokens on the record. A method that
        trains on probes also replays the learned facts and neighbour prompts its candidate can move (a subject's
        earlier documents, a known subject's other facts), so they hold with the new delta beside the others; they
        go to `run.replay`, a few rows of which each step trains beside all of the document's own."""
        how = self.weigher.weighting(run.record.get("weighting") or self.settings.weighting)
        examples, shown = self.weigher.examples({**run.record, "weighting": how}, run.suites["own"])
        if run.method.probe_contexts:
            moved = self.may_move(run)
            run.replay = self.weigher.probe_examples([p for p in run.suites["learned"] + run.suites["neighbours"]
                                                      if p.asked in moved])
        self.documents.update(run.doc_id, weighting_used=how, **shown, scores={"before": run.before.summary()})
        return examples

    def train(self, run: Run, examples: list[Example], own: list[Probe], report_progress: bool = True,
              plan: gate.RetryPlan | None = None) -> None:
        """Train the run's method for the step budget, stopping once the document's own probes pass; a retry's
        plan scales the budget and the learning rate."""
        self.forget_loaded()  # from here the methods hold a candidate, not the parent
        budget = self._budget(examples, bool(own))
        optimizer = None
        if plan is not None:
            budget = max(1, round(budget * plan.budget_scale))
            optimizer = run.method.optimizer()
            for group in optimizer.param_groups:
                group["lr"] *= plan.learning_rate_scale
        progress = (lambda step, steps: self.documents.update(run.doc_id, progress={"step": step, "steps": steps})) \
            if report_progress else (lambda step, steps: None)
        progress(0, budget)
        faults.kill_point("training")
        clock = time.perf_counter()
        pinned = [e for e in self.weigher.probe_examples(own) if e in examples]  # trained in every step
        report = run.method.train(
            examples, budget,
            probes_pass=lambda: bool(own) and all(s == 1.0 for s in score_probes(self.model, self.tokenizer, own)),
            progress=progress, optimizer=optimizer, replay=run.replay, pinned=pinned,
            deadline=clock + self.settings.max_train_s, rest_after_step=self.rest)
        run.timings["train_s"] = run.timings.get("train_s", 0.0) + time.perf_counter() - clock
        run.fields["training"] = {"steps": report.steps, "stopped_early": report.stopped_early,
                                  "timed_out": report.timed_out, "losses": report.losses,
                                  "rested_s": round(report.rested_s, 2)}

    def finish(self, run: Run, probes: list[dict[str, str]],
               on_commit: Callable[[int], object] = lambda version: None, may_retry: bool = False) -> Status:
        """Evaluate the candidate, then commit it as a new version or reject it, with the reason on the record.
        With `may_retry`, a rejection whose reason suggests another try raises RetryAfterRejection instead."""
        self.documents.move(run.doc_id, Status.EVALUATING)
        clock = time.perf_counter()
        moved = self.may_move(run)
        after = self.score(run.suites, {p: s for p, s in self._scores.items() if p.asked not in moved},
                           unscored(run.suites, self._scores, run.deferred))  # the moved ones scored again
        decision = gate.decide(run.before, after, nf_version_0=1.0, nf_tolerance=self.settings.nf_tolerance,
                               learned_tolerance=self.settings.learned_tolerance,
                               neighbour_tolerance=self.settings.neighbour_tolerance,
                               require_own_probes=self.settings.require_own_probes)
        run.timings["gate_s"] = time.perf_counter() - clock
        self.rest_after_phase(run, "gate_s")
        scores = {"before": run.before.summary(), "after": after.summary(),
                  "own_before": run.before.own, "own_after": after.own}
        outcome = {"gate": decision.to_json(), "scores": scores, **run.fields}
        if not decision.accepted:
            timed_out = (run.fields.get("training") or {}).get("timed_out")  # more steps would not fit either
            plan = gate.retry_plan(decision) if may_retry and self.settings.retry_on_rejection and not timed_out \
                else None
            if plan is not None:
                self.forget_loaded()
                raise RetryAfterRejection(plan, decision.to_json(), run.fields.get("training"))
            self.documents.move(run.doc_id, Status.REJECTED, timings=run.rounded_timings(), **outcome)
            return Status.REJECTED
        # In the new version, the document's own probes belong to the learned suite.
        metrics = {**after.summary(), "learned_acc": accuracy(gate.scored(after.learned + after.own)),
                   **self.general_drift(run)}
        self._commit(run, probes, metrics, outcome, on_commit)
        return Status.COMMITTED

    def may_move(self, run: Run) -> set[tuple[str, str]]:
        """The (prompt, namespace) of the parent's scored probes (every suite's) whose answers the candidate may
        change. What it may change is set once it has begun (a routed candidate's key), not by training, so weigh's
        answer serves the gate."""
        if run.moved is None:
            run.moved = run.method.affected_among({p.asked for p in self._scores})
        return run.moved

    def _commit(self, run: Run, probes: list[dict[str, str]], metrics: dict[str, Any], outcome: dict[str, Any],
                on_commit: Callable[[int], object]) -> None:
        """The accepted candidate as a new version: its manifest, the commit, the record, the announcement."""
        clock = time.perf_counter()
        spec = registry.get(run.method.name)
        manifest = {"documents": [run.doc_id], "probes": probes, "method": spec.name, "metrics": metrics,
                    "namespace": namespace_of(run.record), **outcome, **run.method.manifest_fields()}
        faults.kill_point("before_commit")
        version = self.versions.commit(run.parent, run.method.delta(), manifest, spec.delta_file)
        faults.kill_point("after_commit")
        run.method.committed(version)
        self._loaded, self._scores, self._scored = version, self._last_scores, (version, self._reach)
        self._write_scores(version)
        run.timings["commit_s"] = time.perf_counter() - clock
        on_commit(version)
        self.documents.move(run.doc_id, Status.COMMITTED, version=version, timings=run.rounded_timings(), **outcome)
        self.publish(version)

    def reject(self, run: Run, reason: str) -> Status:
        """Rejected before any training, the reason on the record."""
        self.forget_loaded()
        self.documents.move(run.doc_id, Status.REJECTED, scores={"before": run.before.summary()},
                            gate=gate.Decision(False, reason).to_json())
        return Status.REJECTED

    # -- pieces ----------------------------------------------------------------------------------
    def forget_loaded(self) -> None:
        """The methods no longer hold a committed version: the next job loads its parent again."""
        self._loaded = None
        for method in self.methods.values():
            method.activate(None)

    def method(self, name: str) -> UpdateMethod:
        """A registered method's training side, built on the learner's model on first use."""
        if name not in self.methods:
            self.methods[name] = registry.get(name).trainer.build(self.model, self.tokenizer, self.settings)
        return self.methods[name]

    def load_state(self, state: KnowledgeState) -> None:
        """Every method's state as of one version (a method with state there is built first)."""
        for name in state:
            self.method(name)
        for name, method in self.methods.items():
            method.load(state.get(name))

    def _ensure_suites(self) -> None:
        """The NF suite and the general prompts' continuations, made on version 0 the first time."""
        if self.suites.nf_suite() is None or self.suites.general() is None:
            self.forget_loaded()
            self.load_state({})
            self.suites.ensure_nf_suite(self.model_name,
                                        lambda probes: score_probes(self.model, self.tokenizer, probes))
            self.suites.ensure_general(self.model_name, lambda prompts: greedy_continuations(
                self.model, self.tokenizer, prompts, GENERAL_TOKENS))

    def general_drift(self, run: Run) -> dict[str, Any]:
        """The share of the general prompts the candidate continues otherwise than version 0, and which. Only the
        prompts the candidate can move are continued again (for the routed method, those whose route it
        changed: usually none); the others are as in the parent. Not a gate: what each version shows."""
        base = self.suites.general() or {}
        parent = self.versions.manifest(run.parent).get("metrics", {}) if run.parent else {"general_changed": []}
        before = parent.get("general_changed")
        todo = [p for p in base if before is None or run.method.affected(p)]  # a version from before: all of them
        continuations = {}
        for group in self._routed_groups([Probe(p, "") for p in todo]):
            prompts = [p.prompt for p in group]
            made = greedy_continuations(self.model, self.tokenizer, prompts, GENERAL_TOKENS)
            continuations.update(zip(prompts, made))
        changed = drifted(base, before or [], continuations)
        return {"general_drift": len(changed) / len(base) if base else None, "general_changed": changed}

    def _lineage_suites(self, version: int) -> tuple[dict[str, list[Probe]], str]:
        """The suites whose scores are saved for `version`, as routed for the job in hand's namespaces, and what
        they hold for (workers/saved_scores.py)."""
        facts, neighbours = self._lineage(version)
        suites = {"nf": self.suites.nf_probes(), "learned": [f.probe for f in facts], "neighbours": neighbours}
        settings = {spec.name: self.settings.method_config(spec.name).model_dump() for spec in registry.registered()}
        return suites, saved_scores.fingerprint(version, self._reach, self.model_name, settings,
                                                [f.document_id for f in facts], suites)

    def _lineage(self, version: int) -> tuple[list[LearnedFact], list[Probe]]:
        """The learned facts and neighbour prompts along `version`'s lineage, of the namespaces the job in hand routes
        for: walked once per version and namespaces, not once by the commit that saves the version's scores and again
        by the next job from it (0.9 + 0.5 s at 100,000 documents). Walked again once a manifest was rewritten (an
        erasure scrubs a removed document's)."""
        walk = (version, self._reach, self.versions.rewrites())
        if self._walked is None or self._walked[0] != walk:
            self._walked = (walk, learned_facts(self.versions, version, self._reach),
                            committed_neighbours(self.versions, version, self._reach))
        return self._walked[1], self._walked[2]

    def _read_scores(self, version: int) -> dict[Probe, float]:
        suites, check = self._lineage_suites(version)
        return saved_scores.from_saved(self.suites.saved_scores(), check, suites)

    def _write_scores(self, version: int, lineage: tuple[dict[str, list[Probe]], str] | None = None) -> None:
        """`lineage`: what _lineage_suites(version) gave, where the caller has it (the lineage is not walked again)."""
        suites, check = lineage or self._lineage_suites(version)
        self.suites.save_scores(saved_scores.to_saved(check, suites, self._scores))

    def score(self, suites: dict[str, list[Probe]], known: dict[Probe, float] | None = None,
              left_out: Collection[Probe] = ()) -> gate.SuiteScores:
        """Every suite's probe scores; probes in `known` keep their score, those `left_out` (a deferred run's never
        scored: `unscored`) are None. A probe is scored with the routes the served model would take for it
        (_scored_batches)."""
        scores = dict(known or {})
        todo = [p for suite in suites.values() for p in suite if p not in scores and p not in left_out]
        self._score_into(scores, todo)
        self._last_scores = scores
        return gate.SuiteScores(**{name: [scores.get(p) for p in probes] for name, probes in suites.items()})

    def _score_into(self, scores: dict[Probe, float], probes: list[Probe], parent: bool = False) -> None:
        """`probes`' scores added to `scores`; `parent`: routed as in the candidate's parent."""
        for batch in self._scored_batches(probes, parent):
            scores.update(zip(batch, score_probes(self.model, self.tokenizer, batch)))

    def score_deferred(self, run: Run) -> None:
        """A deferred run's parent scores of the learned facts and neighbour prompts its candidate may move, routed as
        in the parent (the candidate not yet trained, the documents it retires in): the gate compares only those, as
        any other probe answers after as before. With no tolerance, its decision is the one every score would give."""
        if not run.deferred:
            return
        clock = time.perf_counter()
        todo = unscored(run.suites, self._scores, True)
        moved = run.method.affected_among({p.asked for p in todo})
        scores = dict(self._scores)
        self._score_into(scores, [p for p in todo if p.asked in moved], parent=True)
        run.before = self.score(run.suites, scores, unscored(run.suites, scores, True))
        self._scores = self._last_scores
        run.timings["score_moved_s"] = time.perf_counter() - clock

    def add_neighbours(self, run: Run, own: list[Probe]) -> None:
        """After `begin`: the neighbour prompts of the document's known subjects (core/neighbours.py) that the
        candidate can move and the lineage does not check yet, each with the continuation the parent serves (the
        candidate's fresh delta adds nothing yet), into the suite the gate keeps. A routed document moves only
        prompts that name its subject with what it is asked about, so most have none."""
        if not self.settings.neighbour_tokens or not own:
            return
        clock = time.perf_counter()
        namespace = namespace_of(run.record)
        checked = {p.prompt for p in run.suites["neighbours"] if p.namespace == namespace}
        subjects = familiar_subjects(run.record["text"], [(p.prompt, p.answer) for p in own])
        prompts = [Probe(prompt, "", namespace) for prompt in neighbour_prompts(subjects, [p.prompt for p in own])
                   if prompt not in checked and run.method.affected(prompt, namespace)]
        made = []
        for group in self._routed_groups(prompts):
            outs = greedy_continuations(self.model, self.tokenizer, [p.prompt for p in group],
                                        self.settings.neighbour_tokens)
            made += [Probe(p.prompt, out.rstrip(), namespace) for p, out in zip(group, outs) if out.strip()]
        if made:
            run.suites["neighbours"] += made
            scores = dict(self._scores)
            self._score_into(scores, made)  # as their continuations were made, in a deferred run too
            run.before = self.score(run.suites, scores, unscored(run.suites, scores, run.deferred))
            self._scores = self._last_scores
            run.fields["neighbours"] = to_json(made)
            run.timings["neighbours_s"] = time.perf_counter() - clock

    def _scored_batches(self, probes: list[Probe], parent: bool = False) -> Iterator[list[Probe]]:
        """The probes in batches of one forward pass, each batch's routes on while the caller scores it: a method
        that routes per row (the routed one) gives each row its own route, so probes routed to different documents
        share a pass; other methods' routes split the batches. None on after. A rest follows each batch's work
        (`_rest_after_slice`). `parent`: routed as in the candidate's parent (UpdateMethod.parent_route)."""
        per_row = [m for m in self.methods.values() if m.per_row]
        for group in self._routed_groups(probes, rows_apart=True, parent=parent):
            for start in range(0, len(group), SCORE_BATCH):
                batch = group[start:start + SCORE_BATCH]
                for method in per_row:
                    routing = method.parent_route if parent else method.route
                    method.activate_rows([routing(p.prompt, p.namespace) for p in batch])
                clock = time.perf_counter()
                yield batch
                self._rest_after_slice(time.perf_counter() - clock)

    def _routed_groups(self, probes: list[Probe], rows_apart: bool = False,
                       parent: bool = False) -> Iterator[list[Probe]]:
        """The probes in groups that take the same routes on every method (with `rows_apart`, on every method that
        does not route per row), each group's routes on while the caller uses it; none after. `parent`: as in the
        candidate's parent."""
        splitting = {name: m for name, m in self.methods.items() if not (rows_apart and m.per_row)}
        groups: dict[tuple, list[Probe]] = {}
        for probe in dict.fromkeys(probes):
            routes = tuple((name, (m.parent_route if parent else m.route)(probe.prompt, probe.namespace))
                           for name, m in splitting.items())
            groups.setdefault(routes, []).append(probe)
        try:
            for routes, group in groups.items():
                for name, route in routes:
                    self.methods[name].activate(route)
                yield group
        finally:
            for method in self.methods.values():
                method.activate(None)

    def _budget(self, examples: list[Example], has_probes: bool) -> int:
        if has_probes:
            return self.settings.max_steps
        tokens = sum(len(e.input_ids) for e in examples)
        return max(4, min(self.settings.max_steps, 4 * math.ceil(tokens / 128)))
