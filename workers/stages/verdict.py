"""The gate's verdict on a trained candidate: the suites scored again where the candidate may have moved them, the
gate's decision (workers/gate.py), and what the version shows of the general prompts."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from core.probes import GENERAL_TOKENS, drifted
from core.scoring import Probe
from workers import gate
from workers.run import Run
from workers.stages.parts import Parts
from workers.stages.scoring import Scores, unscored
from workers.stages.weigh import may_move


@dataclass
class Verdict:
    decision: gate.Decision
    after: gate.SuiteScores  # the candidate's scores of every suite
    scores: Scores  # every probe score of the candidate (those it cannot move: the parent's)


def evaluate(parts: Parts, run: Run) -> Verdict:
    """The candidate's scores (only the probes it may move scored again) and the gate's decision on them."""
    clock = time.perf_counter()
    held, settings = parts.held, parts.settings
    moved = may_move(parts, run)
    kept = {p: s for p, s in held.scores.items() if p.asked not in moved}
    after, scores = parts.scorer.score(run.suites, kept, unscored(run.suites, held.scores, run.deferred))
    decision = gate.decide(run.before, after, nf_version_0=1.0, nf_tolerance=settings.gate.nf_tolerance,
                           learned_tolerance=settings.gate.learned_tolerance,
                           neighbour_tolerance=settings.gate.neighbour_tolerance,
                           require_own_probes=settings.gate.require_own_probes,
                           made_probes=run.made_probes)
    if not decision.accepted:
        decision.broken = gate.lost(run.suites, run.before, after)
    run.timings["gate_s"] = time.perf_counter() - clock
    parts.rests.after_phase(run.timings, "gate_s")
    return Verdict(decision, after, scores)


def general_drift(parts: Parts, run: Run, parent_version: int | None = None) -> dict[str, Any]:
    """The share of the general prompts the candidate continues otherwise than version 0, and which. Only the prompts
    the candidate can move are continued again (for the routed method, those whose route it changed: usually none);
    the others are as in the parent (`parent_version`, where it is committed on another than its own). Not a gate:
    what each version shows."""
    base = parts.suites.general() or {}
    on = run.parent if parent_version is None else parent_version
    parent = parts.versions.manifest(on).get("metrics", {}) if on else {"general_changed": []}
    before = parent.get("general_changed")
    todo = [p for p in base if before is None or parts.held.candidate.affected(p)]  # a version from before: all of them
    continuations = {p.prompt: out for p, out in parts.scorer.continuations([Probe(p, "") for p in todo],
                                                                           GENERAL_TOKENS)}
    changed = drifted(base, before or [], continuations)
    return {"general_drift": len(changed) / len(base) if base else None, "general_changed": changed}
