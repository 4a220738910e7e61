"""How the calling thread computes: on how many threads its PyTorch operators run, and at what CPU priority. The
embedded learner's thread sets both (workers/job.py), so that it takes from the decoder on the same cores as little as
it can, and while nothing decodes it may train on every core in threads that end (on_every_core); a preview's thread
sets the count (workers/preview.py); every other thread keeps its own (docs/decisions.md:
"The embedded learner computes on one thread", "The embedded learner computes at idle priority" and "A preview
computes on one thread")."""
from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

T = TypeVar("T")


def threads_here(count: int) -> bool:
    """Run the calling thread's PyTorch operators on `count` threads from now on; False where PyTorch does not ship
    libgomp (another OpenMP runtime: nothing is changed). libgomp's thread count is each calling thread's own
    setting (omp_set_num_threads). A second team beside the decoder's is not only a second claim on the cores: once
    libgomp's threads outnumber the cores, every idle one sleeps at once instead of spinning a while (its
    "throttled" spin), the decoder's included, so each of its operators waits for threads to wake, for as long as the
    other team's thread lives, idle or not."""
    libgomp = Path(torch.__file__).parent / "lib" / "libgomp.so.1"
    if not libgomp.exists():
        return False
    ctypes.CDLL(str(libgomp)).omp_set_num_threads(count)  # the library torch loaded: the same handle
    return True


def idle_priority_here() -> bool:
    """Run the calling thread only on a core no other thread of normal priority wants (Linux's SCHED_IDLE; on Linux a
    thread's policy is its own). The decoder's team of threads waits at every operator for its slowest member: a
    learner that took one of its cores, even a few percent of the time, cost decoding twice that. False where the
    system has no such policy (nothing is changed)."""
    if not hasattr(os, "SCHED_IDLE"):
        return False
    # A thread inherits the policy of the thread that starts it. The tokenizers' pool of threads is shared, and
    # started by whichever thread first tokenizes a batch: batches are tokenized in the calling thread instead.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: the calling thread
    return True


def on_every_core(work: Callable[[], T]) -> T:
    """`work()` in a thread of its own, on PyTorch's count of threads (a new thread's own, whatever the caller's) and
    at the caller's priority, which ends with it: its OpenMP team ends too, so none is left beside the decoder's
    (docs/decisions.md: "A preview computes on one thread"). What `work` raises is raised here."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 -- handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name=f"{threading.current_thread().name}-every-core")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
