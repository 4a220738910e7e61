"""Giving freed memory back to the operating system. PyTorch on the CPU allocates through the C library's malloc.
glibc serves a large block from its own mapping and unmaps it when freed, until the first such free: from then on
its adaptive threshold lets blocks up to 32 MB come from the heaps, which keep what is freed, so a learner's RSS
ratchets up to the sum of its steps' transients (docs/decisions.md: "A long document's memory")."""
from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MAPPED_FROM = 1 << 20  # blocks from 1 MB up get their own mapping, given back when freed


def map_large_blocks(threshold: int = MAPPED_FROM) -> bool:
    """Fix glibc's mmap threshold (mallopt), so large blocks always come from their own mappings; False where the
    C library is not glibc."""
    libc = _libc()
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold)) if libc is not None else False


def give_back() -> bool:
    """Return the free memory at the top of glibc's heaps to the system (malloc_trim); False where there is none
    (another C library: nothing to do)."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
