"""The parent's scores a run adds once its candidate has begun (and so knows which prompts it may move): the neighbour
prompts of the document's known subjects, and a deferred run's learned facts and neighbour prompts it may move."""
from __future__ import annotations

import time

from core.namespaces import namespace_of
from core.probes import to_json
from core.scoring import Probe
from workers.neighbours import familiar_subjects, neighbour_prompts
from workers.run import Run
from workers.stages.parts import Parts
from workers.stages.scoring import unscored


def add_neighbours(parts: Parts, run: Run, own: list[Probe]) -> None:
    """The neighbour prompts of the document's known subjects (workers/neighbours.py) that the candidate can move and
    the lineage does not check yet, each with the continuation the parent serves (the candidate's fresh delta adds
    nothing yet), into the suite the gate keeps. A routed document moves only prompts that name its subject with what
    it is asked about, so most have none."""
    if not parts.settings.gate.neighbour_tokens or not own:
        return
    clock = time.perf_counter()
    namespace = namespace_of(run.record)
    checked = {p.prompt for p in run.suites["neighbours"] if p.namespace == namespace}
    begun = parts.held.candidate.begun
    subjects = familiar_subjects(run.record["text"], [(p.prompt, p.answer) for p in own], begun.key if begun else ())
    prompts = [Probe(prompt, "", namespace) for prompt in neighbour_prompts(subjects, [p.prompt for p in own])
               if prompt not in checked and parts.held.candidate.affected(prompt, namespace)]
    made = [Probe(p.prompt, out.rstrip(), namespace)
            for p, out in parts.scorer.continuations(prompts, parts.settings.gate.neighbour_tokens) if out.strip()]
    if made:
        run.suites["neighbours"] += made
        held = parts.held
        scores = dict(held.scores)
        parts.scorer.score_into(scores, made)  # as their continuations were made, in a deferred run too
        run.before, held.scores = parts.scorer.score(run.suites, scores, unscored(run.suites, scores, run.deferred))
        run.fields["neighbours"] = to_json(made)
        run.timings["neighbours_s"] = time.perf_counter() - clock


def score_deferred(parts: Parts, run: Run) -> None:
    """A deferred run's parent scores of the learned facts and neighbour prompts its candidate may move, routed as in
    the parent (the candidate not yet trained, the documents it retires in): the gate compares only those, as any
    other probe answers after as before. With no tolerance, its decision is the one every score would give."""
    if not run.deferred:
        return
    clock = time.perf_counter()
    held = parts.held
    todo = unscored(run.suites, held.scores, True)
    moved = held.candidate.affected_among({p.asked for p in todo})
    scores = dict(held.scores)
    parts.scorer.score_into(scores, [p for p in todo if p.asked in moved], parent=True)
    run.before, held.scores = parts.scorer.score(run.suites, scores, unscored(run.suites, scores, True))
    run.timings["score_moved_s"] = time.perf_counter() - clock
