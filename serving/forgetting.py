"""The retention report behind GET /health/forgetting, built from manifests and document records."""
from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

from core.documents import DocumentStore
from core.lifecycle import Status
from core.probes import ProbeSuites, to_json
from core.state import LEARNED, NEIGHBOURS, Fold, folded
from core.versions import VersionStore


def version_row(manifest: dict[str, Any]) -> dict[str, Any]:
    metrics = manifest.get("metrics", {})
    return {
        "version": manifest["version"],
        "parent": manifest["parent"],
        "documents": manifest["documents"],
        "method": manifest["method"],
        "nf_acc": metrics.get("nf_acc", 1.0 if manifest["version"] == 0 else None),
        "learned_acc": metrics.get("learned_acc"),
        "must_keep_acc": metrics.get("must_keep_acc"),
        "neighbours_acc": metrics.get("neighbours_acc"),
        # probes a learner without saved scores never scored (no candidate could move them): not in the shares
        "learned_unscored": metrics.get("learned_unscored", 0),
        "neighbours_unscored": metrics.get("neighbours_unscored", 0),
        # the share of the general prompts continued otherwise than by version 0 (None: a version from before)
        "general_drift": metrics.get("general_drift", 0.0 if manifest["version"] == 0 else None),
        "decision": "base" if manifest["version"] == 0 else "committed",
        "created_at": manifest.get("created_at"),
        "delta_bytes": manifest.get("delta_bytes", 0),
        "replaces": len(manifest.get("replaces", [])),  # facts of earlier documents it replaced
        # facts found in its document that it did not learn (committed partly: `not_learned` names them)
        "not_learned": sum(not f["learned"] for f in manifest.get("facts", [])),
        "removes": manifest.get("removes"),  # the document a removal took out
    }


def lineage_rows(name: str, own: Callable[[dict[str, Any]], list[dict[str, Any]]], whose: str) -> Fold[list[dict]]:
    """The rows `own(manifest)` gives along a lineage, less those of a document a later removal took out (row[whose]
    names it; one document per manifest, never committed again once removed)."""
    def step(rows: list[dict[str, Any]], manifest: dict[str, Any]) -> None:
        rows.extend(own(manifest))

    def removing(rows: list[dict[str, Any]], gone: str) -> None:
        rows[:] = [row for row in rows if row[whose] != gone]
    return Fold(name, list, step, list, removing)


REPLACEMENTS = lineage_rows("replacements", lambda manifest: [
    {**replaced, "replaced_by": manifest["documents"][0], "in_version": manifest["version"]}
    for replaced in manifest.get("replaces", [])], "replaced_by")
NOT_LEARNED = lineage_rows("not_learned", lambda manifest: [
    {"document_id": manifest["documents"][0], "version": manifest["version"],
     "facts": [{"prompt": f["prompt"], "answer": f["answer"]} for f in manifest["facts"] if not f["learned"]]}
] if any(not f["learned"] for f in manifest.get("facts", [])) else [], "document_id")


def replacements(versions: VersionStore, version: int) -> tuple[dict[str, Any], ...]:
    """Every fact a later document replaced along the lineage: which, by which document, in which version."""
    return tuple(folded(versions, REPLACEMENTS, version))


def not_learned(versions: VersionStore, version: int) -> tuple[dict[str, Any], ...]:
    """Every document along the lineage committed partly: the facts found in it that it did not learn."""
    return tuple(folded(versions, NOT_LEARNED, version))


def fold_lineage(versions: VersionStore) -> None:
    """Fold what the retention report and a document's record read of the current version's lineage (a walk of
    every manifest), so that the first reads after a start do not wait for it; each later version is then one step
    from its parent's."""
    current = versions.current()
    for fold in (REPLACEMENTS, NOT_LEARNED, LEARNED, NEIGHBOURS):
        folded(versions, fold, current)


def newest(ordered: list[int], before: int | None, limit: int) -> tuple[list[int], int | None]:
    """A page of `ordered` (ascending): its `limit` greatest items below `before` (all: None), ascending, and the
    `before` that asks for the page older than it (None: there is none)."""
    end = len(ordered) if before is None else bisect.bisect_left(ordered, before)
    start = max(0, end - limit)
    return ordered[start:end], (ordered[start] if start > 0 else None)


def report(versions: VersionStore, suites: ProbeSuites, documents: DocumentStore, limit: int = 100,
           before: int | None = None, last_events: int = 10) -> dict[str, Any]:
    """The retention report; its history is one page (`limit` versions below `before`), and the replaced and
    not-learned lists hold their `limit` newest: the report's cost does not grow with the versions kept."""
    current = versions.current()
    page, older = newest(versions.versions(), before, limit)
    rows = [version_row(versions.manifest(v)) for v in page]
    now = version_row(versions.manifest(current))
    suite = suites.nf_suite()
    rejected = documents.with_status(Status.REJECTED, last_events)
    return {
        "current_version": current,
        "not_to_forget": {
            "probes": len(suite["probes"]) if suite else 0,
            "acc_version_0": 1.0 if suite and suite["probes"] else None,  # the suite is what version 0 answers
            "acc_now": now["nf_acc"],
        },
        "learned": {
            "probes": len(folded(versions, LEARNED, current)),
            "acc_now": now["learned_acc"],
            "unscored": now["learned_unscored"],
        },
        "must_keep": {"probes": to_json(suites.must_keep()), "acc_now": now["must_keep_acc"]},
        "neighbours": {"probes": len(folded(versions, NEIGHBOURS, current).kept),
                       "acc_now": now["neighbours_acc"],
                       "unscored": now["neighbours_unscored"]},
        "history": rows,
        "history_before": older,  # ?before= this for the older page
        "events": versions.events()[-last_events:],
        # the `limit` newest of each, and how many there are
        "replaced": (replaced := replacements(versions, current))[-limit:],
        "replaced_total": len(replaced),
        "not_learned": (partly := not_learned(versions, current))[-limit:],
        "not_learned_total": len(partly),
        "last_rejections": [
            {"document_id": d["document_id"], "reason": (d["gate"] or {}).get("reason"),
             "scores": d["scores"], "at": d["updated_at"]}
            for d in rejected
        ],
    }
