"""How many threads one thread's PyTorch work uses. PyTorch's CPU build runs its operators on OpenMP (libgomp),
whose thread count is each calling thread's own setting (omp_set_num_threads): the thread that sets it changes,
the others keep theirs. The embedded learner's thread uses one by default (CKL_EMBEDDED_LEARNER_THREADS): with a
second team of two beside the decoder's on two cores, decoding lost as much while the learner all but rested as
while it worked (docs/decisions.md: "The embedded learner computes on one thread")."""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch


def threads_here(count: int) -> bool:
    """Run the calling thread's PyTorch operators on `count` threads from now on; False where PyTorch does not ship
    libgomp (another OpenMP runtime: nothing is changed)."""
    libgomp = Path(torch.__file__).parent / "lib" / "libgomp.so.1"
    if not libgomp.exists():
        return False
    ctypes.CDLL(str(libgomp)).omp_set_num_threads(count)  # the library torch loaded: the same handle
    return True
