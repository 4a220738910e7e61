"""Learning one document, as a pipeline of named steps: prepare, weigh, train, then evaluate and commit or reject.

Updates are strictly sequential: a candidate names the version it was trained from, and the store
refuses the commit if another version became current meanwhile; the job then runs again from the new
current version. A removal (DELETE /documents/{id}) is a job too: it shares prepare and the
evaluate-and-commit tail, with the method's `remove` in place of weigh and train.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from filelock import FileLock

from service import faults
from service.documents import FINAL, DocumentStore
from service.knowledge import methods
from service.knowledge.probes import ProbeSuites, from_json, to_json
from service.knowledge.scoring import Probe, accuracy, score_probes
from service.knowledge.state import KnowledgeState, learned_manifests, resolve
from service.knowledge.versions import AlreadyCommitted, ParentMoved, VersionStore
from service.model.loader import LoadedModel, load_model
from service.settings import Settings
from workers import examples as docs
from workers import gate
from workers.attention.phi import TrainAttention, packaged_checkpoint
from workers.methods import UpdateMethod, trainer_class
from workers.methods.base import Example

log = logging.getLogger(__name__)

MAX_PARENT_RETRIES = 3
TOP_WEIGHTED = 12


@dataclass
class Job:
    """One document's run from one parent version: what prepare found and what later steps add."""
    record: dict[str, Any]
    parent: int
    method: UpdateMethod
    suites: dict[str, list[Probe]]
    before: gate.SuiteScores
    timings: dict[str, float] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)  # what the document record and manifest also get

    @property
    def doc_id(self) -> str:
        return self.record["document_id"]


class Retry(Exception):
    """A first rejection that suggests a second try (workers/gate.py: retry_plan)."""

    def __init__(self, plan: gate.RetryPlan, first_gate: dict[str, Any], first_training: dict[str, Any] | None) -> None:
        super().__init__(plan.why)
        self.plan, self.first_gate, self.first_training = plan, first_gate, first_training


class Learner:
    def __init__(self, settings: Settings, loaded: LoadedModel | None = None,
                 publish: Callable[[int], None] | None = None) -> None:
        self.settings = settings
        loaded = loaded or load_model(settings)
        self.model, self.tokenizer, self.model_name = loaded.model, loaded.tokenizer, loaded.name
        self.methods: dict[str, UpdateMethod] = {}  # built on first use, all on the same model
        root = settings.data_dir
        self.documents = DocumentStore(root)
        self.versions = VersionStore(root / "versions")
        self.suites = ProbeSuites(root / "probes")
        self.publish = publish or (lambda version: None)
        self.lease = FileLock(str(root / "learner.lock"))
        self._train_attention: TrainAttention | None = None
        self._last_scores: dict[Probe, float] = {}
        # What the methods hold now, and the probe scores of that version: a job from the version this learner
        # committed last neither loads the lineage nor scores the unchanged probes again.
        self._loaded: int | None = None
        self._scores: dict[Probe, float] = {}

    # -- the job ---------------------------------------------------------------------------------
    def learn(self, document_id: str) -> str:
        """Run the job for one document; returns its final status. One learner at a time per data folder holds
        the lease: a second worker waits for it, then finds the document finished or trains from the version
        the first one committed (training in parallel would only be thrown away when the parent moves)."""
        with self.lease:
            return self._learn_once(document_id)

    def _learn_once(self, document_id: str) -> str:
        record = self.documents.get(document_id)
        if record["status"] in FINAL:
            return record["status"]
        record = self.documents.update(document_id, status="training", attempts=record["attempts"] + 1, error=None)
        try:
            for _ in range(MAX_PARENT_RETRIES):
                try:
                    parent = self.versions.current()
                    if (held := self.versions.holding(document_id, parent)) is not None:
                        raise AlreadyCommitted(document_id, held)
                    return self._remove(parent, record) if record.get("removes") else self._learn(parent, record)
                except ParentMoved as moved:
                    log.warning("document %s: %s; training again", document_id, moved)
                except AlreadyCommitted as done:  # a retried job whose commit happened: only the record missed it
                    self._forget_loaded()
                    if record.get("removes"):
                        self._erase(record["removes"], done.version)
                    self.documents.update(document_id, status="committed", version=done.version)
                    return "committed"
            raise RuntimeError(f"the current version kept moving during {MAX_PARENT_RETRIES} attempts")
        except Exception as exc:
            self._forget_loaded()  # the methods may hold a half-trained candidate
            final = record["attempts"] > self.settings.job_retries
            self.documents.update(document_id, status="failed" if final else "queued",
                                  error=f"{type(exc).__name__}: {exc}")
            raise

    def _learn(self, parent: int, record: dict[str, Any]) -> str:
        own = from_json(record["probes"]) or self.auto_probes(record)
        try:
            return self._attempt(parent, record, own)
        except Retry as retry:  # a rejection is not the end: once more, as its reason suggests
            log.warning("document %s: rejected (%s); trying again: %s", record["document_id"],
                        retry.first_gate["reason"], retry.plan.why)
            return self._attempt(parent, record, own, retry)

    def _attempt(self, parent: int, record: dict[str, Any], own: list[Probe], retry: Retry | None = None) -> str:
        job = self.prepare(parent, record, record["method"], own=own)
        answers = [p.answer for p in own]
        job.method.begin(job.doc_id, record["text"], answers)
        if reason := job.method.refusal():
            return self.reject(job, reason)
        if unreachable := [p.prompt for p in own if not job.method.can_serve(p.prompt, record["text"], answers)]:
            return self.reject(job, f"{len(unreachable)} of the document's probes cannot reach what it teaches with "
                                    f"method {job.method.name!r} (e.g. {unreachable[0]!r}): a routed document "
                                    "answers only prompts that name its rare words")
        examples = self.weigh(job)
        self.train(job, examples, own, plan=retry.plan if retry else None)
        if retry:
            job.fields["retried"] = {"first_gate": retry.first_gate, "first_training": retry.first_training,
                                     "plan": retry.plan.why}
        return self.finish(job, probes=to_json(own), may_retry=retry is None)

    def _remove(self, parent: int, record: dict[str, Any]) -> str:
        """A new version without one document's contribution (the method's `remove`), gated like any other."""
        target = self.documents.get(record["removes"])
        lineage = self.versions.lineage(parent)
        position = next((i for i, m in enumerate(lineage) if m["version"] == target["version"]), None)
        if position is None:
            raise ValueError(f"version {target['version']} of document {target['document_id']} is not in the "
                             f"lineage of the current version {parent}")
        name = lineage[position]["method"]
        counted = learned_manifests(self.versions, parent)
        learned = [p for m in counted if target["document_id"] not in m["documents"] for p in from_json(m["probes"])]
        job = self.prepare(parent, record, name, learned=learned)
        if not any(target["document_id"] in m["documents"] for m in counted):
            return self.reject(job, f"document {target['document_id']} is no longer in version {parent}")
        # The method's later versions whose documents still count (not removals, not removed ones).
        later = [m for m in counted if m["version"] > lineage[position]["version"] and m["method"] == name
                 and not m.get("removes")]
        earlier = resolve(self.versions, lineage[position]["parent"] or 0).get(name)
        self._forget_loaded()  # the methods' state changes now; a rejection must not leave it loaded

        def relearn() -> None:
            for manifest in later:
                own = from_json(manifest["probes"])  # the probes it was committed with, made ones included
                for later_id in manifest["documents"]:
                    later_record = self.documents.get(later_id)
                    self.train(Job(later_record, parent, job.method, job.suites, job.before),
                               self.examples(later_record, own)[0], own, report_progress=False)

        replayed = job.method.remove(lineage[position], later, self.versions.load_delta, earlier, relearn)
        job.fields.update(removes=target["document_id"], replayed=replayed)
        # The target is marked (and erased) first, so a crash after the commit cannot let it be removed twice.
        return self.finish(job, probes=[], on_commit=lambda version: self._erase(target["document_id"], version))

    def _erase(self, document_id: str, removed_in: int) -> None:
        """A removed document keeps its id and what happened, not what it said. The version that learned it
        keeps its delta and manifest (its probes): activating it needs an admin's force, and asking it by name
        (ckl-vN) is refused."""
        self.documents.update(document_id, removed_in_version=removed_in, text="", probes=[], auto_probes=[],
                              top_weighted_tokens=[])

    # -- the steps -------------------------------------------------------------------------------
    def prepare(self, parent: int, record: dict[str, Any], name: str, own: list[Probe] = (),
                learned: list[Probe] | None = None) -> Job:
        """The parent's state on every method, the suites to gate on, and their scores before training."""
        method = self.method(name)
        self._ensure_nf_suite()
        if self._loaded != parent:
            self.load_state(resolve(self.versions, parent))
            self._loaded, self._scores = parent, {}
        if learned is None:
            learned = [p for m in learned_manifests(self.versions, parent) for p in from_json(m["probes"])]
        suites = {"nf": self.suites.nf_probes(), "learned": learned, "must_keep": self.suites.must_keep(),
                  "own": list(own)}
        clock = time.perf_counter()
        job = Job(record, parent, method, suites, self.score(suites, self._scores))
        self._scores = self._last_scores  # the parent's scores, every probe of the suites included
        job.timings["score_before_s"] = time.perf_counter() - clock
        return job

    def weigh(self, job: Job) -> list[Example]:
        """The document's training examples, with its weighting's most-weighted tokens on the record."""
        how = self._weighting(job.record.get("weighting") or self.settings.weighting)
        examples, top = self.examples({**job.record, "weighting": how}, job.suites["own"])
        self.documents.update(job.doc_id, weighting_used=how, top_weighted_tokens=top,
                              scores={"before": job.before.summary()})
        return examples

    def train(self, job: Job, examples: list[Example], own: list[Probe], report_progress: bool = True,
              plan: gate.RetryPlan | None = None) -> None:
        """Train the job's method for the step budget, stopping once the document's own probes pass; a retry's
        plan scales the budget and the learning rate."""
        self._forget_loaded()  # from here the methods hold a candidate, not the parent
        budget = self._budget(examples, bool(own))
        optimizer = None
        if plan is not None:
            budget = max(1, round(budget * plan.budget_scale))
            optimizer = job.method.optimizer()
            for group in optimizer.param_groups:
                group["lr"] *= plan.learning_rate_scale
        progress = (lambda step, steps: self.documents.update(job.doc_id, progress={"step": step, "steps": steps})) \
            if report_progress else (lambda step, steps: None)
        progress(0, budget)
        faults.kill_point("training")
        clock = time.perf_counter()
        report = job.method.train(
            examples, budget,
            probes_pass=lambda: bool(own) and all(s == 1.0 for s in score_probes(self.model, self.tokenizer, own)),
            progress=progress, optimizer=optimizer)
        job.timings["train_s"] = job.timings.get("train_s", 0.0) + time.perf_counter() - clock
        job.fields["training"] = {"steps": report.steps, "stopped_early": report.stopped_early,
                                  "losses": report.losses}

    def finish(self, job: Job, probes: list[dict[str, str]],
               on_commit: Callable[[int], object] = lambda version: None, may_retry: bool = False) -> str:
        """Evaluate the candidate, then commit it as a new version or reject it, with the reason on the record.
        With `may_retry`, a rejection whose reason suggests another try raises Retry instead."""
        self.documents.update(job.doc_id, status="evaluating")
        clock = time.perf_counter()
        before = self._scores
        after = self.score(job.suites, {p: s for p, s in before.items() if not job.method.affected(p.prompt)})
        decision = gate.decide(job.before, after, nf_version_0=1.0, nf_tolerance=self.settings.nf_tolerance,
                               learned_tolerance=self.settings.learned_tolerance,
                               require_own_probes=self.settings.require_own_probes)
        job.timings["gate_s"] = time.perf_counter() - clock
        scores = {"before": job.before.summary(), "after": after.summary(),
                  "own_before": job.before.own, "own_after": after.own}
        outcome = {"gate": decision.to_json(), "scores": scores, **job.fields}
        if not decision.accepted:
            plan = gate.retry_plan(decision) if may_retry and self.settings.retry_on_rejection else None
            if plan is not None:
                self._forget_loaded()
                raise Retry(plan, decision.to_json(), job.fields.get("training"))
            self.documents.update(job.doc_id, status="rejected", timings=_rounded(job.timings), **outcome)
            return "rejected"
        clock = time.perf_counter()
        # In the new version, the document's own probes belong to the learned suite.
        metrics = {**after.summary(), "learned_acc": accuracy(after.learned + after.own)}
        spec = methods.get(job.method.name)
        manifest = {"documents": [job.doc_id], "probes": probes, "method": spec.name, "metrics": metrics,
                    **outcome, **job.method.manifest_fields()}
        faults.kill_point("before_commit")
        version = self.versions.commit(job.parent, job.method.delta(), manifest, spec.delta_file)
        faults.kill_point("after_commit")
        job.method.committed(version)
        self._loaded, self._scores = version, self._last_scores
        job.timings["commit_s"] = time.perf_counter() - clock
        on_commit(version)
        self.documents.update(job.doc_id, status="committed", version=version, timings=_rounded(job.timings),
                              **outcome)
        self.publish(version)
        return "committed"

    def auto_probes(self, record: dict[str, Any]) -> list[Probe]:
        """For a document sent without probes: probes made from its text with phi's weights (workers/examples.py),
        those its method can answer (a routed method: prompts that name the document's key), on the record."""
        if self._weighting("train_attention") != "train_attention":
            return []
        doc = docs.encode(self.tokenizer, record["text"])
        method = self.method(record["method"])
        made = docs.auto_probes(doc, self._phi().weights(doc.ids))
        made = docs.without_subject_answers(made)
        while True:  # the answers are left out of what a probe may be checked against: all of them
            answers = [answer for _, answer in made]
            kept = [(prompt, answer) for prompt, answer in made if method.can_serve(prompt, record["text"], answers)]
            if kept == made:
                break
            made = kept
        probes = [Probe(prompt, answer) for prompt, answer in made]
        self.documents.update(record["document_id"], auto_probes=to_json(probes))
        return probes

    def reject(self, job: Job, reason: str) -> str:
        """Rejected before any training, the reason on the record."""
        self._forget_loaded()
        self.documents.update(job.doc_id, status="rejected", scores={"before": job.before.summary()},
                              gate=gate.Decision(False, reason).to_json())
        return "rejected"

    # -- pieces ----------------------------------------------------------------------------------
    def _forget_loaded(self) -> None:
        """The methods no longer hold a committed version: the next job loads its parent again."""
        self._loaded = None
        for method in self.methods.values():
            method.activate(None)

    def method(self, name: str) -> UpdateMethod:
        """A registered method's training side, built on the learner's model on first use."""
        if name not in self.methods:
            self.methods[name] = trainer_class(name).build(self.model, self.tokenizer, self.settings)
        return self.methods[name]

    def load_state(self, state: KnowledgeState) -> None:
        """Every method's state as of one version (a method with state there is built first)."""
        for name in state:
            self.method(name)
        for name, method in self.methods.items():
            method.load(state.get(name))

    def _ensure_nf_suite(self) -> None:
        if self.suites.nf_suite() is None:
            self._forget_loaded()
            self.load_state({})
            self.suites.ensure_nf_suite(self.model_name, lambda probes: score_probes(self.model, self.tokenizer, probes))

    def score(self, suites: dict[str, list[Probe]], known: dict[Probe, float] | None = None) -> gate.SuiteScores:
        """Every suite's probe scores; probes in `known` keep their score. A probe is scored with the routes the
        served model would take for it (probes with the same routes in one batch)."""
        scores = dict(known or {})
        groups: dict[tuple, list[Probe]] = {}
        for probe in dict.fromkeys(p for probes in suites.values() for p in probes if p not in scores):
            routes = tuple((name, m.route(probe.prompt)) for name, m in self.methods.items())
            groups.setdefault(routes, []).append(probe)
        for routes, probes in groups.items():
            for name, route in routes:
                self.methods[name].activate(route)
            scores.update(zip(probes, score_probes(self.model, self.tokenizer, probes)))
        for method in self.methods.values():
            method.activate(None)
        self._last_scores = scores
        return gate.SuiteScores(**{name: [scores[p] for p in probes] for name, probes in suites.items()})

    def examples(self, record: dict[str, Any], own: list[Probe]) -> tuple[list[Example], list[dict[str, Any]]]:
        """The document's examples weighted as the record asks (all-zero weights fall back to uniform), with the
        extra contexts its method asks for, and the document's most-weighted tokens."""
        doc = docs.encode(self.tokenizer, record["text"])
        how = self._weighting(record.get("weighting") or self.settings.weighting)
        phi = self._phi().weights if how == "train_attention" else None
        answers = [p.answer for p in own]

        method, window = self.method(record["method"]), self.settings.train_window_tokens

        def weigh(encoded: docs.Encoded) -> list[float]:
            return docs.token_weights(encoded, how, answers, phi, self.settings.weight_threshold, method.weight_floor)

        weights = weigh(doc)
        if not any(weights[1:]):
            weights = docs.token_weights(doc, "uniform", [], None, 0.0)
        examples = docs.document_examples(doc, weights, window, self.tokenizer.bos_token_id, method.sentence_contexts)
        if method.probe_contexts:
            examples += docs.probe_examples(self.tokenizer, [(p.prompt, p.answer) for p in own])
        ranked = sorted(range(len(doc.ids)), key=lambda i: -weights[i])[:TOP_WEIGHTED]
        top = [{"token": self.tokenizer.decode([doc.ids[i]]), "weight": round(weights[i], 4), "position": i}
               for i in sorted(ranked) if weights[i] > 0]
        return examples, top

    def _weighting(self, asked: str) -> str:
        """train_attention falls back to uniform for a base model with no packaged phi (none configured)."""
        if asked == "train_attention" and self.settings.train_attention_checkpoint is None \
                and not packaged_checkpoint(self.model_name).with_suffix(".json").exists():
            log.warning("no Train-Attention checkpoint for model %s: uniform weights", self.model_name)
            return "uniform"
        return asked

    def _phi(self) -> TrainAttention:
        """phi for the served base model, loaded on first use (a mismatched checkpoint fails the document)."""
        if self._train_attention is None:
            path = self.settings.train_attention_checkpoint or packaged_checkpoint(self.model_name)
            self._train_attention = TrainAttention.from_path(self.model, path)
        return self._train_attention

    def _budget(self, examples: list[Example], has_probes: bool) -> int:
        if has_probes:
            return self.settings.max_steps
        tokens = sum(len(e.input_ids) for e in examples)
        return max(4, min(self.settings.max_steps, 4 * math.ceil(tokens / 128)))


def _rounded(timings: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in timings.items()}
