"""Weigh: the document's training examples (its tokens weighted by the document's weighting) and, for a method that
trains on probes, the earlier facts to replay beside them."""
from __future__ import annotations

import time

from core.training import Example
from workers.run import Run
from workers.stages.parts import Parts


def may_move(parts: Parts, run: Run) -> set[tuple[str, str]]:
    """The (prompt, namespace) of the parent's scored probes (every suite's) whose answers the candidate may change.
    What it may change is set once it has begun (a routed candidate's key), not by training, so weigh's answer
    serves the gate."""
    if run.moved is None:
        run.moved = parts.held.candidate.affected_among({p.asked for p in parts.held.scores})
    return run.moved


def weigh(parts: Parts, run: Run) -> tuple[list[Example], list[Example], list[Example]]:
    """The document's training examples (its text's, then its probes'), with its weighting's most-weighted tokens on
    the record; its probes' examples, which every step trains; and the examples to replay: a method that trains on
    probes also replays the learned facts and neighbour prompts its candidate can move (a subject's earlier
    documents, a known subject's other facts), so they hold with the new delta beside the others; a few rows of them
    train in each step beside all of the document's own."""
    clock = time.perf_counter()
    weigher = parts.weigher
    how = weigher.weighting(run.record.get("weighting") or parts.settings.training.weighting)
    examples, pinned, shown = weigher.examples({**run.record, "weighting": how}, run.suites["own"])
    replay = []
    if run.method.probe_contexts:
        moved = may_move(parts, run)
        replay = weigher.probe_examples([p for p in run.suites["learned"] + run.suites["neighbours"]
                                         if p.asked in moved])
    parts.documents.update(run.doc_id, weighting_used=how, **shown, scores={"before": run.before.summary()})
    run.timings["weigh_s"] = time.perf_counter() - clock
    return examples, pinned, replay
