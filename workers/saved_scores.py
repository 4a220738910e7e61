"""A version's probe scores kept on disk, so that a learner that starts (a worker restarted, a server started
again) does not score every learned fact of its parent again before its first job: about 45 ms a probe on 2
cores, 40 s at 1,000 documents, over an hour at 100,000 (docs/decisions.md, A learner that starts reads its
parent's scores).

The scores are kept by position in the suites a version's lineage gives (the NF suite, the learned facts, the
neighbour prompts) with the documents' ids: nothing derived from any document's text, so erasure has nothing to
scrub here. They hold only for the version, the namespaces they were routed for, the model, the methods' settings
and the routing threshold they were scored with; anything else reads as nothing saved. A learner without them scores only the
probes its candidates may move (the learner's deferred runs); those it never scored are saved as null. Pure
functions; the learner reads and writes the file (core/probes.py: ProbeSuites.saved_scores).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from core.scoring import Probe

SUITES = ("nf", "learned", "neighbours")  # the must-keep list and a document's own probes are few: scored again
# How probes are routed when scored; saved under another, scores read as nothing saved. 2: a shared document's run
# routes each probe as its namespace asks it (core/namespaces.routed_for), no longer with every tenant's keys.
ROUTING = 2


def fingerprint(version: int, reach: frozenset[str] | None, model: str, settings: dict[str, Any],
                documents: list[str], suites: dict[str, list[Probe]]) -> str:
    """What the scores hold for: how they were routed, the version, the namespaces, the model, the methods'
    settings, the learned facts' documents in order and each suite's size."""
    what = {"routing": ROUTING, "version": version, "reach": sorted(reach) if reach is not None else None,
            "model": model, "settings": settings, "documents": documents, "sizes": [len(suites[name]) for name in SUITES]}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def to_saved(check: str, suites: dict[str, list[Probe]], scores: dict[Probe, float]) -> dict[str, Any]:
    """The suites' scores by position; null for a probe not scored (a deferred run's: workers/stages/prepare.py)."""
    return {"check": check, "scores": {name: [scores.get(p) for p in suites[name]] for name in SUITES}}


def from_saved(saved: dict[str, Any] | None, check: str, suites: dict[str, list[Probe]]) -> dict[Probe, float]:
    """The scores saved for these suites (the same check), by probe, those not scored left out; {} when they were
    saved for anything else."""
    if not saved or saved.get("check") != check:
        return {}
    return {p: s for name in SUITES for p, s in zip(suites[name], saved["scores"][name], strict=True) if s is not None}
