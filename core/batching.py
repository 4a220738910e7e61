"""Which examples a training step trains: the pinned ones (a document's probes) in every step and the others in
turn, within a step's tokens; passes of similar length; and the replayed rows most at risk."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.training import Example


def take(examples: list[Example], at: int, size: int, max_tokens: int | None = None) -> tuple[list[Example], int]:
    """Up to `size` examples and `max_tokens` tokens (at least one) from position `at`, wrapping around, never one
    twice; and the position after them."""
    batch, tokens = [], 0
    while len(batch) < min(size, len(examples)):
        example = examples[at % len(examples)]
        if batch and max_tokens is not None and tokens + len(example.input_ids) > max_tokens:
            break
        batch.append(example)
        tokens += len(example.input_ids)
        at += 1
    return batch, at


def batches(examples: list[Example], size: int, steps: int, max_tokens: int | None = None) -> list[list[Example]]:
    """`steps` batches of up to `size` examples and `max_tokens` tokens (at least one example), taken in order,
    wrapping around: a batch never holds an example twice."""
    made, at = [], 0
    for _ in range(steps):
        batch, at = take(examples, at, size, max_tokens)
        made.append(batch)
    return made


def step_batches(examples: list[Example], pinned: list[Example], size: int, steps: int,
                 max_tokens: int) -> list[list[Example]]:
    """Each step's batch: the pinned examples, then the others in turn in what is left of `size` and `max_tokens`.
    Pinned examples that would leave no room (an article's many facts, each also asked as a question) come round in
    turn too, in three quarters of the step's tokens: a step costs its tokens, however many facts a document states.
    Short pinned examples cost little beside a window: a step computes examples of unlike lengths apart
    (UpdateMethod.losses)."""
    rest = [e for e in examples if e not in pinned]
    pinned_tokens = sum(len(e.input_ids) for e in pinned)
    room_tokens = max_tokens * 3 // 4
    if pinned_tokens > room_tokens:
        kept = batches(list(pinned), len(pinned), steps, room_tokens)
    else:
        kept = [list(pinned)] * steps
    made, at = [], 0
    for step in kept:
        batch, at = take(rest, at, max(1, size - len(step)), max(1, max_tokens - sum(len(e.input_ids) for e in step)))
        made.append(step + batch)
    return made


PADDING_SHARE = 2.0  # a group's longest example at most this many times its shortest


def by_length(lengths: list[int]) -> list[list[int]]:
    """The examples' indices in groups of similar length, shortest first: a new group where an example is more than
    PADDING_SHARE times the group's shortest."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if groups and lengths[i] <= PADDING_SHARE * lengths[groups[-1][0]]:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def most_at_risk(losses: list[float], n: int) -> list[int]:
    """The `n` replayed rows to train next: those with the highest loss, the first of equal ones."""
    return sorted(range(len(losses)), key=lambda i: (-losses[i], i))[:n]

