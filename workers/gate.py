"""The gate: commit a candidate only if it kept what it must keep. Pure functions over probe scores."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from core.scoring import accuracy

# The suites whose probes a learner without their saved scores scores only where a candidate may move them (the
# learner's deferred run): the others, None, answer after as before. The rest are always scored.
DEFERRABLE = ("learned", "neighbours")


def scored(scores: list[float | None]) -> list[float]:
    """The scores there are: a deferred probe (None) is left out of every share."""
    return [s for s in scores if s is not None]


@dataclass
class SuiteScores:
    nf: list[float]
    learned: list[float | None]
    must_keep: list[float]
    own: list[float]
    neighbours: list[float | None] = field(default_factory=list)  # a known subject's other prompts (workers/neighbours.py)

    def summary(self) -> dict[str, float | int | None]:
        summary: dict[str, float | int | None] = {
            "nf_acc": accuracy(self.nf), "learned_acc": accuracy(scored(self.learned)),
            "must_keep_acc": accuracy(self.must_keep), "own_acc": accuracy(self.own),
            "neighbours_acc": accuracy(scored(self.neighbours))}
        for name in DEFERRABLE:
            if unscored := sum(s is None for s in getattr(self, name)):
                summary[f"{name}_unscored"] = unscored  # left out of the share above
        return summary


@dataclass
class Decision:
    accepted: bool
    reason: str
    checks: list[dict[str, Any]] = field(default_factory=list)
    broken: list[dict[str, str]] = field(default_factory=list)  # what a rejected candidate lost (`lost`)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RetryPlan:
    """A second try after a rejection, shaped by what failed."""
    budget_scale: float
    learning_rate_scale: float
    why: str


KEPT_CHECKS = {"not_to_forget", "learned", "must_keep", "neighbours"}


def retry_plan(decision: Decision) -> RetryPlan | None:
    """What a rejection suggests: a candidate that moved what must be kept tries smaller and fewer steps; one
    that did not learn its own probes tries twice the steps; anything else is final."""
    failed = {c["check"] for c in decision.checks if not c["passed"]}
    if failed & KEPT_CHECKS:
        return RetryPlan(0.5, 0.5, "it moved what must be kept: half the learning rate, half the steps")
    if failed == {"own_probes"}:
        return RetryPlan(2.0, 1.0, "its probes did not pass: twice the steps")
    return None


def kept_share(before: list[float | None], after: list[float | None]) -> tuple[float, int] | None:
    """(share of the probes that passed before and still pass, how many passed before); None when none passed.
    Each fact is checked against its own last passing state, so losses cannot add up version after version. A
    probe not scored (None) is not counted: with no tolerance, a share below 1 is a lost probe wherever it is, and
    a deferred run scores every probe the candidate may move."""
    passing = [a for b, a in zip(before, after) if b == 1.0]
    return (sum(a == 1.0 for a in passing) / len(passing), len(passing)) if passing else None


# The suites whose lost probes a rejection names; must-keep probes are an admin's, not shown to a teach key.
NAMED_LOSSES = ("learned", "neighbours", "nf")
LOSSES_NAMED = 10


def lost(suites: dict[str, list[Any]], before: SuiteScores, after: SuiteScores) -> list[dict[str, str]]:
    """The probes that passed in the parent and fail in the candidate (the first LOSSES_NAMED): the learned facts,
    neighbour prompts and not-to-forget probes a rejected candidate broke."""
    found = [{"suite": name, "prompt": probe.prompt, "answer": probe.answer}
             for name in NAMED_LOSSES
             for probe, b, a in zip(suites.get(name, []), getattr(before, name), getattr(after, name))
             if b == 1.0 and a is not None and a != 1.0]
    return found[:LOSSES_NAMED]


def decide(before: SuiteScores, after: SuiteScores, *, nf_version_0: float, nf_tolerance: float,
           learned_tolerance: float, require_own_probes: bool, neighbour_tolerance: float = 0.0,
           made_probes: bool = False) -> Decision:
    """`made_probes`: the document's probes are the facts the service found in it (it was sent without any): it
    passes with any of them learned, and the record names those that were not (a partial commit, never silent)."""
    checks = []

    def check(name: str, ok: bool, value: float | None, limit: float | None, rule: str) -> None:
        checks.append({"check": name, "passed": ok, "value": value, "limit": limit, "rule": rule})

    nf = accuracy(after.nf)
    if nf is not None:
        limit = nf_version_0 - nf_tolerance
        check("not_to_forget", nf >= limit - 1e-9, nf, limit, f"NF accuracy >= version 0 ({nf_version_0:.3f}) - {nf_tolerance}")
    if kept := kept_share(before.learned, after.learned):
        share, passing = kept
        limit = 1.0 - learned_tolerance
        check("learned", share >= limit - 1e-9, share, limit,
              f"of the {passing} learned facts that pass in the parent, a share >= {limit:g} still pass")
    if kept := kept_share(before.neighbours, after.neighbours):
        share, passing = kept
        limit = 1.0 - neighbour_tolerance
        check("neighbours", share >= limit - 1e-9, share, limit,
              f"of the {passing} neighbour prompts of known subjects, a share >= {limit:g} keep their continuation")
    keep_before, keep_after = accuracy(before.must_keep), accuracy(after.must_keep)
    if keep_before is not None and keep_after is not None:
        check("must_keep", keep_after >= keep_before - 1e-9, keep_after, keep_before, "must-keep accuracy never drops")
    own = accuracy(after.own)
    if require_own_probes and own is not None and made_probes:
        check("own_probes", any(s == 1.0 for s in after.own), own, 1 / len(after.own),
              "at least one fact found in the document is learned (those not learned are named on the record)")
    elif require_own_probes and own is not None:
        check("own_probes", all(s == 1.0 for s in after.own), own, 1.0, "every probe of the document passes")
    failed = [c for c in checks if not c["passed"]]
    if failed:
        reason = "; ".join(f"{c['check']}: {c['value']:.3f} < {c['limit']:.3f} ({c['rule']})" for c in failed)
        return Decision(False, reason, checks)
    return Decision(True, "all checks passed", checks)
