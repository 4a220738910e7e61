"""The C library's heaps (core/memory.py), in a process of their own: glibc's settings are per process."""
import subprocess
import sys

import pytest

from tests.conftest import ROOT

HEAPS = """
import ctypes, ctypes.util, sys, tempfile, threading
from core.memory import few_arenas
if sys.argv[1] == "capped":
    assert few_arenas(2)
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.fopen.restype = ctypes.c_void_p
start, hold = threading.Barrier(8), threading.Event()
def allocate():
    start.wait()  # all at once: each thread wants a heap no other holds
    libc.malloc(4096)
    hold.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
with tempfile.NamedTemporaryFile() as out:
    handle = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(handle))
    libc.fclose(ctypes.c_void_p(handle))
    print(open(out.name).read().count("<heap nr="))
hold.set()
"""


def heaps(mode: str) -> int:
    env = {"PATH": "/usr/bin:/bin"}  # no MALLOC_ARENA_MAX from the caller
    done = subprocess.run([sys.executable, "-c", HEAPS, mode], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_info")
def test_the_server_caps_the_heaps_its_threads_take():
    """few_arenas (`ckl serve` calls it before it starts its threads): eight threads allocating at once share two heaps,
    where glibc alone gives them more (up to eight per core)."""
    assert heaps("capped") <= 2 < heaps("default")
