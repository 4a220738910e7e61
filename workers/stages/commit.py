"""The tail of every job: the gate's verdict, then the candidate committed as a new version or rejected, with the
reason on the record. A first rejection whose reason suggests another try raises RetryAfterRejection instead."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from core import erasure, faults, registry
from core.lifecycle import FINAL, Status, after_failed_attempt
from core.namespaces import namespace_of
from core.scoring import accuracy
from core.versions import ParentMoved
from workers import gate
from workers.run import RetryAfterRejection, Run
from workers.stages import rebase
from workers.stages.parts import Parts
from workers.stages.scoring import Scores
from workers.stages.verdict import evaluate, general_drift

MAX_REBASES = 3


def finish(parts: Parts, run: Run, probes: list[dict[str, str]],
           on_commit: Callable[[int], object] = lambda version: None, may_retry: bool = False,
           removal: bool = False) -> Status:
    """Evaluate the candidate, then commit or reject it. `probes`: the document's, as its manifest keeps them;
    `on_commit(version)` runs once the version is committed, before the record says so. A `removal` (an
    erasure) is committed whatever the gate says: what it broke goes on the record, but a document's owner may
    always take it out."""
    if parts.documents.to_gate(run.doc_id) is None:
        return withdrawn(parts, run.doc_id)
    verdict = evaluate(parts, run)
    before, after = run.before, verdict.after
    scores = {"before": before.summary(), "after": after.summary(), "own_before": before.own, "own_after": after.own}
    outcome = {"gate": {**verdict.decision.to_json(), **({"overridden_by_erasure": True}
                                                         if removal and not verdict.decision.accepted else {})},
               "scores": scores, **run.fields, **({"facts": facts_found(probes, after.own)} if after.own else {})}
    if not verdict.decision.accepted and not removal:
        timed_out = (run.fields.get("training") or {}).get("timed_out")  # more steps would not fit either
        plan = gate.retry_plan(verdict.decision) \
            if may_retry and parts.settings.gate.retry_on_rejection and not timed_out else None
        if plan is not None:
            parts.held.forget_loaded()
            raise RetryAfterRejection(plan, verdict.decision.to_json(), run.fields.get("training"))
        erasure.if_withdrawn(parts.documents, parts.versions, parts.documents.move(  # asked during the gate
            run.doc_id, Status.REJECTED, timings=run.rounded_timings(), **outcome))
        return Status.REJECTED
    if not removal and parts.documents.to_commit(run.doc_id) is None:  # its owner withdrew it during the gate
        return withdrawn(parts, run.doc_id)
    # In the new version, the document's own probes belong to the learned suite (a fact found but not learned does
    # not count as one lost).
    learned = gate.scored(after.learned) + [s for s in after.own if s == 1.0]
    metrics = {**after.summary(), "learned_acc": accuracy(learned),
               **general_drift(parts, run)}
    commit(parts, run, verdict.scores, probes, metrics, outcome, on_commit)
    return Status.COMMITTED


def facts_found(probes: list[dict[str, str]], scores: list[float]) -> list[dict[str, Any]]:
    """Each of the document's facts (its probes: given, or found in its text) and whether the candidate learned it."""
    return [{"prompt": p["prompt"], "answer": p["answer"], "learned": s == 1.0} for p, s in zip(probes, scores)]


def commit(parts: Parts, run: Run, scores: Scores, probes: list[dict[str, str]], metrics: dict[str, Any],
           outcome: dict[str, Any], on_commit: Callable[[int], object]) -> int:
    """The accepted candidate as a new version (`scores`: its probe scores): its manifest, the commit, the record,
    the announcement."""
    clock = time.perf_counter()
    spec = registry.get(run.method.name)
    begun = parts.held.candidate.begun  # a per-document method's document: its routing key
    manifest = {"documents": [run.doc_id], "probes": probes, "method": spec.name, "metrics": metrics,
                "namespace": namespace_of(run.record), **outcome, **({"key": begun.key} if begun else {}),
                **run.method.manifest_fields()}
    faults.kill_point("before_commit")
    on, delta, trained = run.parent, run.method.delta(), manifest
    for attempt in range(MAX_REBASES + 1):
        try:
            version = parts.versions.commit(on, delta, manifest, spec.delta_file)
            break
        except ParentMoved:  # another worker committed: on its version where they cannot meet, else trained again
            if attempt == MAX_REBASES or (on := rebase.onto(parts, run)) is None:
                raise
            manifest = rebase.rebased_manifest(parts, run, trained, on)
    faults.kill_point("after_commit")
    run.method.committed(version)
    if on == run.parent:
        parts.held.committed(version, scores)
    else:  # what the learner holds is its parent's table with the candidate: not the new version's
        parts.held.rebased(version, on, {p: s for p, s in scores.items() if p.asked in run.moved})
    run.timings["commit_s"] = time.perf_counter() - clock
    on_commit(version)
    parts.documents.move(run.doc_id, Status.COMMITTED, version=version, timings=run.rounded_timings(), **outcome,
                         **({"committing": False} if not run.record.get("removes") else {}))
    parts.publish(version)
    return version


def attempt_failed(parts: Parts, document_id: str, attempts: int, exc: Exception) -> None:
    """After an attempt that raised: queued again while retries are left, else failed; committed if a version holds
    it (DELETE erases a failed one); erased if its owner asked to withdraw it meanwhile and it is final."""
    if parts.documents.get(document_id)["status"] in FINAL:
        return
    status = after_failed_attempt(attempts, parts.settings.job_retries)
    held = parts.versions.holding(document_id, parts.versions.current()) if status is Status.FAILED else None
    erasure.if_withdrawn(parts.documents, parts.versions, parts.documents.move(
        document_id, Status.COMMITTED if held else status, **({"version": held} if held else {}),
        error=f"{type(exc).__name__}: {exc}"))


def withdrawn(parts: Parts, document_id: str) -> Status:
    """A document its owner withdrew while it trained (DocumentStore.ask_to_withdraw): not gated, nothing committed,
    and erased at once."""
    parts.held.forget_loaded()
    erasure.if_withdrawn(parts.documents, parts.versions, parts.documents.move(document_id, Status.REJECTED))
    return Status.REJECTED


def reject(parts: Parts, run: Run, reason: str) -> Status:
    """Rejected before any training, the reason on the record."""
    parts.held.forget_loaded()
    rejected = parts.documents.move(run.doc_id, Status.REJECTED, scores={"before": run.before.summary()},
                                    gate=gate.Decision(False, reason).to_json())
    erasure.if_withdrawn(parts.documents, parts.versions, rejected)
    return Status.REJECTED
