"""A candidate whose parent is no longer current (another worker committed meanwhile): committed on top of the
current version instead, where the versions committed since its parent cannot meet it, so that trained and gated
from the current version it would have been the same; else the learner trains it again from there.

They cannot meet when each is a document of a per-document method added (no removal, nothing replaced or retired),
the candidate is one too and replaces none of their facts, the must-keep list is the same, and routing with them and
without them differs on none of the prompts the candidate may move: each such prompt (of the parent's suites, the
general prompts, the candidate's own, and the facts and neighbour prompts they brought) is routed alike with the
candidate from either version and alike without it, the candidate moves the same prompts from either, and it trains
beside the same documents. Then every score the gate compares moves alike from either version. The gate's decision
is the same where it compares shares with no tolerance (the learned facts' and neighbour prompts', by default); the
NF share, checked against version 0 with a tolerance, is the parent's plus what the versions since changed of it, so
a rebase is taken only where they lowered it by nothing.
"""
from __future__ import annotations

from typing import Any

from core import registry
from core.namespaces import SHARED, namespace_of, routed_for
from core.probes import from_json
from core.routing.candidate import Candidate
from core.routing.route import route
from core.routing.table import compose
from core.scoring import Probe
from core.state import learned_facts, replaced_by
from workers.examples import about_words
from workers.facts import old_values
from workers.run import Run
from workers.stages.parts import Parts
from workers.stages.verdict import general_drift


def added_documents(manifests: list[dict[str, Any]]) -> bool:
    """Whether every manifest adds one document of a per-document method and takes nothing out."""
    return all(registry.get(m["method"]).per_document and "key" in m and not m.get("removes")
               and not m.get("replaces") and not m.get("retires") for m in manifests)


def nf_share(manifest: dict[str, Any] | None) -> float:
    """A version's NF share as its manifest recorded it (version 0: all of the suite; an empty suite: 1.0 too)."""
    share = 1.0 if manifest is None else manifest.get("metrics", {}).get("nf_acc", 0.0)
    return 1.0 if share is None else share


def probes_of(run: Run, parts: Parts, since: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """Every probe the gate of a run from either version may score, and the general prompts, as (prompt, namespace)."""
    asked = {p.asked for suite in run.suites.values() for p in suite}
    asked |= {(prompt, SHARED) for prompt in parts.suites.general() or {}}
    for manifest in since:
        asked |= {p.asked for p in from_json([*manifest.get("probes", []), *manifest.get("neighbours", [])],
                                             namespace_of(manifest))}
    return asked


def replaces_any(parts: Parts, run: Run, current: int, since: list[dict[str, Any]]) -> bool:
    """Whether the document replaces a fact of the versions committed since its parent (as prepare finds those of
    the parent's lineage it replaces)."""
    documents = {d for m in since for d in m["documents"]}
    facts = [f for f in learned_facts(parts.versions, current, parts.held.candidate.reach)
             if f.document_id in documents and f.namespace == namespace_of(run.record)]
    text = run.record["text"]
    own: list[Probe] = run.suites["own"]
    return bool(replaced_by(own, run.record.get("supersedes") or [], facts, old_values(text), about_words(text)))


def onto(parts: Parts, run: Run) -> int | None:
    """The current version, when `run`'s candidate can be committed on it as it is; None: train again."""
    versions, candidate, gate = parts.versions, parts.held.candidate, parts.settings.gate
    current = versions.current()
    if not candidate.per_document or candidate.begun is None or run.fields.get("replaces") \
            or run.fields.get("retires") or run.suites["must_keep"] != parts.suites.must_keep() \
            or gate.learned_tolerance or gate.neighbour_tolerance:
        return None
    lineage, parents = versions.lineage(current), versions.lineage(run.parent)
    # The current version descends from the parent: the parent's lineage is the start of the current one's.
    if [m["version"] for m in lineage[:len(parents)]] != [m["version"] for m in parents] or \
            len(lineage) == len(parents):
        return None
    since = lineage[len(parents):]
    if not added_documents(since) or nf_share(since[-1]) < nf_share(parents[-1] if parents else None) \
            or replaces_any(parts, run, current, since):
        return None
    there = Candidate(compose(lineage), candidate.threshold)  # the candidate as begun from the current version
    there.start(candidate.namespace, True)
    there.begun = candidate.begun
    asked = probes_of(run, parts, since)
    moved = candidate.affected_among(asked)
    if there.affected_among(asked) != moved or there.training_route() != candidate.training_route():
        return None
    for prompt, namespace in moved:
        view = routed_for(namespace, candidate.reach)
        with_it = (candidate.keys(view), there.keys(view))
        without_it = (candidate.before.keys(view), there.before.keys(view))
        if any(route(prompt, here, candidate.threshold) != route(prompt, current_keys, candidate.threshold)
               for here, current_keys in (with_it, without_it)):
            return None
    return current


def rebased_manifest(parts: Parts, run: Run, manifest: dict[str, Any], on: int) -> dict[str, Any]:
    """`manifest` as committed on `on`: its NF share and general prompts' drift are `on`'s with the candidate's
    changes (the learned share stays that of the parent's suites)."""
    metrics = dict(manifest["metrics"])
    if metrics.get("nf_acc") is not None:
        parent = parts.versions.manifest(run.parent) if run.parent else None
        metrics["nf_acc"] += nf_share(parts.versions.manifest(on)) - nf_share(parent)
    metrics.update(general_drift(parts, run, on))
    return {**manifest, "metrics": metrics, "rebased_from": run.parent}
