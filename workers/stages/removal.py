"""A removal job (DELETE /documents/{id}) as the same stages: prepare from the current version, the method's `remove`
in place of weigh and train (it trains again, through the train stage, the later documents a method cannot keep
without relearning), then the gate's verdict and a commit (the document erased), whatever the verdict: an erasure is not the gate's to
veto; what it broke is on the removal's record."""
from __future__ import annotations

from typing import Any

from core import erasure
from core.lifecycle import PENDING, Status
from core.namespaces import namespace_of, reach
from core.probes import from_json
from core.state import learned_facts, learned_manifests, resolve
from workers import gate
from workers.run import Run
from workers.stages.commit import finish, reject, withdrawn
from workers.stages.parts import Parts
from workers.stages.prepare import prepare
from workers.stages.train import train


def settle(parts: Parts, target_id: str) -> None:
    """A removal's target whose commit was under way when its owner's DELETE came (DocumentStore.ask_to_remove),
    ended if still pending: its worker died in the commit, since the caller holds the target's document lease.
    Committed where the current version holds it (the commit happened, its record missed it), else withdrawn and
    erased: its owner was told it is being removed, so no new attempt learns it again."""
    documents, versions = parts.documents, parts.versions
    target = documents.get(target_id)
    if target["status"] not in PENDING:
        return
    if (held := versions.holding(target_id, versions.current())) is not None:
        documents.move(target_id, Status.COMMITTED, version=held, committing=False, error=None)
    elif target.get("withdrawing"):
        withdrawn(parts, target_id)


def remove(parts: Parts, parent: int, record: dict[str, Any]) -> Status:
    """Run the removal `record` asks for from version `parent`; returns the status it ends in."""
    documents, versions = parts.documents, parts.versions
    target = documents.get(record["removes"])
    # A failed target a version holds was served though its record says otherwise: it is removed like a committed one.
    version = target["version"] if target["status"] == Status.COMMITTED else \
        versions.holding(target["document_id"], parent)
    if version is None:  # withdrawn before its commit (settle), or failed before one: nothing to undo
        reason = f"document {target['document_id']} was never committed ({target['status']}): it is erased"
        documents.move(record["document_id"], Status.REJECTED, gate=gate.Decision(False, reason).to_json())
        return Status.REJECTED
    lineage = versions.lineage(parent)
    position = next((i for i, m in enumerate(lineage) if m["version"] == version), None)
    if position is None:
        raise ValueError(f"version {version} of document {target['document_id']} is not in the "
                         f"lineage of the current version {parent}")
    name = lineage[position]["method"]
    counted = learned_manifests(versions, parent)
    facts = learned_facts(versions, parent, reach(namespace_of(target)))  # those its removal can move
    learned = [f.probe for f in facts if f.document_id != target["document_id"]]
    # Every probe scored now: what the removal moves is known only once the state has changed.
    run = prepare(parts, parent, record, name, learned=learned, may_defer=False)
    parts.rests.after_phase(run.timings, "score_before_s")
    if not any(target["document_id"] in m["documents"] for m in counted):
        return reject(parts, run, f"document {target['document_id']} is no longer in version {parent}")
    # The method's later versions whose documents still count (not removals, not removed ones).
    later = [m for m in counted if m["version"] > lineage[position]["version"] and m["method"] == name
             and not m.get("removes")]
    earlier = resolve(versions, lineage[position]["parent"] or 0)
    parts.held.forget_loaded()  # the methods' state changes now; a rejection must not leave it loaded

    def relearn() -> None:
        for manifest in later:
            own = from_json(manifest["probes"])  # the probes it was committed with, made ones included
            for later_id in manifest["documents"]:
                later_record = documents.get(later_id)
                examples, pinned, _ = parts.weigher.examples(later_record, own)
                train(parts, Run(later_record, parent, run.method, run.suites, run.before), examples, own,
                      pinned=pinned, report_progress=False)

    replayed = run.method.remove(lineage[position], later, versions.load_delta, earlier.get(name), relearn)
    if parts.held.candidate.per_document:  # the framework no longer routes to it; what it retired is routed to again
        retired = lineage[position].get("retires", [])
        parts.held.candidate.remove(target["document_id"], [t for t in earlier.table.documents
                                                            if t.document_id in retired])
    run.fields.update(removes=target["document_id"], replayed=replayed)
    # The target is marked (and erased) first, so a crash after the commit cannot let it be removed twice.
    # A removed document keeps its id and what happened (its status stays committed), not what it said
    # (core/erasure.py). A routed document's delta file is deleted; the version that learned it needs an admin's
    # force to be activated (it is composed without the document), and asking it by name (ckl-vN) is refused.
    return finish(parts, run, probes=[], removal=True, on_commit=lambda version: erasure.erase(
        documents, versions, target["document_id"], version))
