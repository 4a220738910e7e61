"""A learner that yields to serving on a machine both share (the embedded worker): while the API decodes, each
training step and each phase of a job is followed by a rest long enough that learning takes at most
CKL_EMBEDDED_LEARN_SHARE of the time. Bounded both ways: teaching never stops under a steady load (it slows
by 1 / share at most), and a rest ends once decoding has stopped (within Scheduler.busy's gap, a second)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from core.settings_groups import EmbeddedSettings
from workers.threads import on_every_core

T = TypeVar("T")

SLICE_S = 0.05  # how often a rest looks whether decoding has ended
# A step spreads over every core only once nothing has decoded for this long: a step under way cannot yield, and one
# that spread while clients paused between requests would slow their next decoding steps until it ended
# (docs/decisions.md: "The embedded learner trains on every core after a quiet spell").
QUIET_S = 10.0


def rest_after(worked_s: float, share: float) -> float:
    """The rest after `worked_s` of work that makes the work `share` of the time."""
    return worked_s * (1 - share) / share


class YieldToServing:
    def __init__(self, share: float, busy: Callable[[], bool]) -> None:
        self.share, self.busy = share, busy

    def __call__(self, worked_s: float) -> float:
        """Rest after `worked_s` of work while `busy()`; returns the seconds rested."""
        if self.share >= 1 or not self.busy():
            return 0.0
        started, rest = time.perf_counter(), rest_after(worked_s, self.share)
        while (rested := time.perf_counter() - started) < rest and self.busy():
            time.sleep(min(SLICE_S, rest - rested))
        return time.perf_counter() - started


class Rests:
    """A job's rests: after each training step, after each slice of a long phase (a batch of probes scored), and after
    each phase for the rest of it. A phase's timing on the record is its work, the rests left out."""

    def __init__(self, rest: Callable[[float], float], busy: Callable[..., bool] | None = None) -> None:
        """`busy(within_s)`: whether the API of this process decodes or did `within_s` ago, where the embedded learner
        trains on every core after QUIET_S without decoding (CKL_EMBEDDED_LEARNER_EVERY_CORE_WHILE_IDLE); None: every
        step on the calling thread."""
        self.rest, self.busy = rest, busy
        self._sliced = [0.0, 0.0]  # within the phase in hand: the work rested for slice by slice, and those rests

    @classmethod
    def beside(cls, embedded: EmbeddedSettings, busy: Callable[..., bool] | None) -> Rests:
        """A learner's rests, `busy` telling whether the API of its process decodes (None: a `ckl worker`, which
        never rests and computes on every core anyway)."""
        spread = embedded.learner_threads and embedded.learner_every_core_while_idle
        return cls(YieldToServing(embedded.learn_share, busy or (lambda: False)), busy if spread else None)

    def compute(self, work: Callable[[], T]) -> T:
        """One training step's work (or a probe check): here, on the calling thread's threads, while the API decodes
        or did within QUIET_S; on every core in a thread that ends with it after that (workers/threads.py:
        on_every_core)."""
        return work() if self.busy is None or self.busy(QUIET_S) else on_every_core(work)

    def step(self, worked_s: float) -> float:
        """A rest after `worked_s` of work; the seconds rested."""
        return self.rest(worked_s)

    def begin_phases(self) -> None:
        """A job's first phase starts: nothing rested within a phase yet."""
        self._sliced = [0.0, 0.0]

    def after_slice(self, worked_s: float) -> None:
        """A rest within a phase, after one slice of it: a long phase yields as often as training does."""
        self._sliced = [self._sliced[0] + worked_s, self._sliced[1] + self.rest(worked_s)]

    def after_phase(self, timings: dict[str, float], phase: str) -> None:
        """A rest after `phase` (if it ran): the phase rested after each slice rests now for the rest of it. The
        phase's timing loses its rests; `rested_s` gains every rest."""
        if phase in timings:
            (work, rests), self._sliced = self._sliced, [0.0, 0.0]
            timings[phase] -= rests
            rested = rests + self.rest(max(0.0, timings[phase] - work))
            timings["rested_s"] = timings.get("rested_s", 0.0) + rested
