"""What the learner's steps pass along: one document's run from one parent version, and a rejection to retry."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.scoring import Probe
from core.training import UpdateMethod
from workers import gate


@dataclass
class Run:
    """One document's run from one parent version: what prepare found and what later steps add."""
    record: dict[str, Any]
    parent: int
    method: UpdateMethod
    suites: dict[str, list[Probe]]
    before: gate.SuiteScores
    timings: dict[str, float] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)  # what the document record and manifest also get
    superseded: list[str] = field(default_factory=list)  # documents every learned fact of which this one replaces
    # The (prompt, namespace) pairs the candidate may move, once it has begun (stages/weigh.py: may_move).
    moved: set[tuple[str, str]] | None = None
    # Whether the parent's learned and neighbour probes are scored only where the candidate may move them
    # (stages/prepare.py); the others are None in `before`.
    deferred: bool = False

    @property
    def doc_id(self) -> str:
        return self.record["document_id"]

    @property
    def made_probes(self) -> bool:
        """Whether its probes are those the service found in its text (it was sent without any)."""
        return not self.record.get("probes")

    def rounded_timings(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.timings.items()}


class RetryAfterRejection(Exception):
    """A first rejection that suggests a second try (workers/gate.py: retry_plan); not the queue's retries."""

    def __init__(self, plan: gate.RetryPlan, first_gate: dict[str, Any], first_training: dict[str, Any] | None) -> None:
        super().__init__(plan.why)
        self.plan, self.first_gate, self.first_training = plan, first_gate, first_training

    def on_record(self) -> dict[str, Any]:
        """What the second try's record says of the first."""
        return {"first_gate": self.first_gate, "first_training": self.first_training, "plan": self.plan.why}
