"""Prepare: the document's probes (its own, or made from its text), the parent's state on every method, the suites
the gate checks and their scores before training; then the candidate begun (its key, what it retires) or refused.

A learner without the parent's saved scores (a worker on a store whose scores were saved under other settings, or
never) defers, where no tolerance needs every share exact: its learned facts and neighbour prompts are scored once
the candidate has begun, only those it may move (parent_scores.score_deferred), not all of them now (48 ms a
probe: 8 minutes at 10,000 documents).
"""
from __future__ import annotations

import time
from typing import Any

from core import registry
from core.namespaces import SHARED, namespace_of
from core.probes import from_json, to_json
from core.scoring import Probe
from core.settings import Settings
from core.state import LearnedFact, replaced_by, same_prompt, superseded
from workers.examples import about_words
from workers.facts import new_values, old_values
from workers.run import Run
from workers.stages.parts import Parts
from workers.stages.scoring import unscored


def own_probes(parts: Parts, record: dict[str, Any]) -> list[Probe]:
    """The document's probes; for one sent without any, those made from its text, kept on the record."""
    if own := from_json(record["probes"], namespace_of(record)):
        return own
    clock = time.perf_counter()
    made = parts.weigher.auto_probes(record)
    parts.rests.step(time.perf_counter() - clock)  # phi read the text: yield to serving as after any phase
    parts.documents.update(record["document_id"], auto_probes=to_json(made))
    return made


def deferrable(settings: Settings) -> bool:
    """Whether runs may defer scoring the learned facts and neighbour prompts: with no tolerance, the gate's decision
    needs only the scores of those the candidate may move."""
    return settings.gate.learned_tolerance == 0 and settings.gate.neighbour_tolerance == 0


def prepare(parts: Parts, parent: int, record: dict[str, Any], name: str, own: list[Probe] = (),
            learned: list[Probe] | None = None, may_defer: bool = True) -> Run:
    """The run of `record` with method `name` from version `parent`: the parent's state on every method, the suites
    to gate on, and their scores before training. `learned`: the learned facts to keep (None: the lineage's, less
    those the document replaces, whose prompts its own suite asks anew where the text names the new value)."""
    held = parts.held
    method = held.method(name)
    clock = time.perf_counter()
    parts.rests.begin_phases()
    # The document's namespace: it is gated on the prompts of the namespaces it can change answers in, routed as
    # they are asked there (a tenant's document cannot move, replace or erode another tenant's facts).
    namespace = namespace_of(record)
    fresh = held.hold(parent, namespace, registry.get(name).per_document)
    facts, neighbours = held.lineage(parent)
    replaced: list[LearnedFact] = []
    if learned is None:  # a document's run: the facts of its namespace it replaces leave the suite it is gated on
        mine = [f for f in facts if f.namespace == namespace]
        text = record["text"]
        replaced = replaced_by(list(own), record.get("supersedes") or [], mine, old_values(text), about_words(text))
        learned = [f.probe for f in facts if f not in replaced]
        own = [*own, *asked_anew(replaced, own, new_values(text))]
    # A known subject's neighbour prompts recorded along the lineage, less those this document's probes ask (it
    # teaches something there); its own are added once the method knows which prompts it can move.
    neighbours = [n for n in neighbours if not any(same_prompt(n.prompt, p.prompt) for p in own)]
    suites = {"nf": parts.suites.nf_probes(), "learned": learned, "must_keep": parts.suites.must_keep(),
              "own": list(own), "neighbours": neighbours}
    left_out = unscored(suites, held.scores, may_defer and deferrable(parts.settings))
    before, held.scores = parts.scorer.score(suites, held.scores, left_out)  # every probe not deferred included
    run = Run(record, parent, method, suites, before, deferred=bool(left_out))
    if replaced:
        run.fields["replaces"] = [{"prompt": f.probe.prompt, "answer": f.probe.answer, "document_id": f.document_id}
                                  for f in replaced]
        run.superseded = superseded(replaced, facts)
    if fresh:  # a learner that starts saves what it scored: the next one need not score it again
        held.write_scores(parent)
    run.timings["score_before_s"] = time.perf_counter() - clock
    return run


def asked_anew(replaced: list[LearnedFact], own: list[Probe], new: dict[str, str]) -> list[Probe]:
    """The replaced facts' prompts that none of the document's probes asks, with the value it says they changed to
    ("from Brackwell to Tiverholm": "Zelmora Foods is headquartered in" -> "Tiverholm"): trained and checked as its
    own, so the prompt the old fact was asked by gets the new answer, not the old one the text also names."""
    asked: list[Probe] = []
    for fact in replaced:
        if fact.probe.answer in new and not any(same_prompt(p.prompt, fact.probe.prompt) for p in [*own, *asked]):
            asked.append(Probe(fact.probe.prompt, new[fact.probe.answer], fact.probe.namespace))
    return asked


def begin(parts: Parts, run: Run, own: list[Probe]) -> str | None:
    """The candidate begun on the document (for a per-document method, its routing key and a fresh state) and what it
    replaces retired; why it must be rejected before any training (None: it may train)."""
    pairs = [(p.prompt, p.answer) for p in own]
    text, candidate = run.record["text"], parts.held.candidate
    if candidate.per_document:
        candidate.begin(run.doc_id, run.method.name, text, pairs, probes_made=not run.record.get("probes"))
    run.method.begin(run.doc_id, text, pairs)
    if reason := candidate.refusal():
        return reason
    if run.superseded and (retired := candidate.retire(run.superseded)):
        run.fields["retires"] = retired  # what those documents taught is no longer served
    if unreachable := candidate.unreachable(pairs):
        return (f"{len(unreachable)} of the document's probes cannot reach what it teaches with method "
                f"{run.method.name!r} (e.g. {unreachable[0]!r}): a document of a per-document method answers only "
                "prompts that name its subject or its rare words")
    return None


def warm(parts: Parts) -> None:
    """Before any document: what a first job would find missing, made now. The default method built, the current
    version loaded, and its suites' scores as a shared document's job routes them, read from the saved file or scored
    and saved: where runs may defer, only those no run defers (the NF suite), as a job would."""
    held = parts.held
    parent = parts.versions.current()
    held.method(parts.settings.method)
    if held.hold(parent, SHARED):
        lineage = held.lineage_suites(parent)
        suites = {**lineage[0], "must_keep": parts.suites.must_keep(), "own": []}
        left_out = unscored(suites, held.scores, deferrable(parts.settings))
        _, held.scores = parts.scorer.score(suites, held.scores, left_out)
        held.write_scores(parent, lineage)
