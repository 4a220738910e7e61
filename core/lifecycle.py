"""A document's lifecycle: its statuses, the moves allowed between them, and the retry rule.

queued -> training -> evaluating -> committed | rejected | failed, plus the moves back that retries and
crashes need (MOVES says which and why). Every status write goes through `transition` (DocumentStore.move),
so a record on disk only ever took allowed moves. The values are the strings the records and the API carry.
"""
from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    QUEUED = "queued"
    TRAINING = "training"
    EVALUATING = "evaluating"
    COMMITTED = "committed"
    REJECTED = "rejected"
    FAILED = "failed"


class IllegalTransition(ValueError):
    """A status move the lifecycle does not allow (or a status it does not know)."""


# What each status may move to. The moves back exist because an attempt can fail (queued again while retries are
# left), a worker can die in any pending status (the next one picks the record up where it stands), and one job
# may train more than once (a rejection retried, a parent that moved). A final status has no moves out: a job
# that finds its document final returns without writing.
MOVES: dict[Status, frozenset[Status]] = {
    Status.QUEUED: frozenset({
        Status.TRAINING,  # a worker starts the job
        Status.QUEUED,  # re-queued under a new job id (its job was lost), or an attempt failed before the learner
        Status.FAILED,  # not queued at all (the queue was down), or that early failure used the last retry
        Status.REJECTED,  # withdrawn: its owner's DELETE before any worker started it (DocumentStore.withdraw)
    }),
    Status.TRAINING: frozenset({
        Status.EVALUATING,  # the candidate is trained
        Status.REJECTED,  # refused before training (the method's refusal, unreachable probes, a removal's target gone),
        # or trained and withdrawn by its owner before the gate (workers/stages/commit.py: withdrawn)
        Status.COMMITTED,  # the version already holds it: a retried job whose commit the record missed
        Status.TRAINING,  # a worker died in training; the next one runs it again (the embedded queue re-runs as is)
        Status.QUEUED,  # the attempt failed with retries left, or a dead worker's document re-queued
        Status.FAILED,  # the attempt failed with none left, or the worker died in it at every allowed attempt
    }),
    Status.EVALUATING: frozenset({
        Status.COMMITTED,  # the gate accepted (or the commit found the document already in a version)
        Status.REJECTED,  # the gate refused
        Status.TRAINING,  # trained again: a rejection retried, a parent that moved, a crash picked up again
        Status.QUEUED,  # as from training
        Status.FAILED,  # as from training
    }),
    Status.COMMITTED: frozenset(),
    Status.REJECTED: frozenset(),
    Status.FAILED: frozenset(),
}

FINAL = frozenset(s for s in Status if not MOVES[s])
PENDING = frozenset(s for s in Status if MOVES[s])


def status_of(value: str) -> Status:
    """A status as a record carries it, or IllegalTransition for one the lifecycle does not know."""
    try:
        return Status(value)
    except ValueError:
        raise IllegalTransition(f"unknown document status {value!r}") from None


def transition(current: Status | str, new: Status | str) -> Status:
    """The status after moving from `current` to `new`; raises IllegalTransition when MOVES does not allow it."""
    current, new = status_of(current), status_of(new)
    if new not in MOVES[current]:
        allowed = ", ".join(sorted(MOVES[current])) or "none: it is final"
        raise IllegalTransition(f"a document cannot move from {current} to {new} (allowed: {allowed})")
    return new


def after_failed_attempt(attempts: int, retries: int) -> Status:
    """The status after a failed attempt (a worker that died in one counts): `attempts` counts every attempt so
    far, that one included. Queued again while retries are left, failed once 1 + `retries` attempts failed."""
    return Status.FAILED if attempts > retries else Status.QUEUED
