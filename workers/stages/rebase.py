"""A candidate whose parent is no longer current (another worker committed meanwhile): committed on top of the
current version instead, where the versions committed since its parent cannot meet it, so that trained and gated
from the current version it would have been the same; else the learner trains it again from there.

They cannot meet when each is a document of a per-document method added (no removal, nothing replaced or retired),
the candidate is one too, and routing with them and without them differs on none of the prompts the candidate may
move: each such prompt (of the parent's suites, the candidate's own, and the facts and neighbour prompts they
brought) is routed alike with the candidate from either version and alike without it, the candidate moves the same
prompts from either, and it trains beside the same documents. The gate scores only the prompts the candidate may
move, with no tolerance by default, so it decides alike from either version; the learned share the version reports
is the parent's suites'.
"""
from __future__ import annotations

from typing import Any

from core import registry
from core.namespaces import namespace_of, routed_for
from core.probes import from_json
from core.routing.candidate import Candidate
from core.routing.route import route
from core.routing.table import compose
from workers.run import Run
from workers.stages.parts import Parts


def added_documents(manifests: list[dict[str, Any]]) -> bool:
    """Whether every manifest adds one document of a per-document method and takes nothing out."""
    return all(registry.get(m["method"]).per_document and "key" in m and not m.get("removes")
               and not m.get("replaces") and not m.get("retires") for m in manifests)


def onto(parts: Parts, run: Run) -> int | None:
    """The current version, when `run`'s candidate can be committed on it as it is; None: train again."""
    versions, candidate = parts.versions, parts.held.candidate
    current = versions.current()
    if not candidate.per_document or candidate.begun is None or run.fields.get("replaces") \
            or run.fields.get("retires") or run.suites["must_keep"] != parts.suites.must_keep():
        return None
    lineage, before = versions.lineage(current), len(versions.lineage(run.parent))
    if len(lineage) <= before or (run.parent and lineage[before - 1]["version"] != run.parent):
        return None  # not a descendant of the parent: a rollback or another branch
    since = lineage[before:]
    if not added_documents(since):
        return None
    now = Candidate(compose(lineage), candidate.threshold)
    now.start(candidate.namespace, True)
    now.begun = candidate.begun
    asked = {p.asked for suite in run.suites.values() for p in suite} | {  # every probe the gate may score
        p.asked for m in since for p in from_json([*m.get("probes", []), *m.get("neighbours", [])],
                                                  namespace_of(m))}
    moved = candidate.affected_among(asked)
    if now.affected_among(asked) != moved or now.training_route() != candidate.training_route():
        return None
    for prompt, namespace in moved:
        view = routed_for(namespace, candidate.reach)
        pairs = ((candidate.keys(view), now.keys(view)), (candidate.before.keys(view), now.before.keys(view)))
        if any(route(prompt, then, candidate.threshold) != route(prompt, there, candidate.threshold)
               for then, there in pairs):
            return None
    return current
