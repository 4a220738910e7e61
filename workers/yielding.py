"""A learner that yields to serving on a machine both share (the embedded worker): while the API decodes, each
training step and each phase of a job is followed by a rest long enough that learning takes at most
CKL_LEARN_SHARE_WHILE_SERVING of the time. Bounded both ways: teaching never stops under a steady load (it slows
by 1 / share at most), and a rest ends once decoding has stopped (within Scheduler.busy's gap, a second)."""
from __future__ import annotations

import time
from collections.abc import Callable

SLICE_S = 0.05  # how often a rest looks whether decoding has ended


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
