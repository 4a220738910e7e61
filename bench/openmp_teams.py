"""`ckl bench openmp-teams`: the served model's decoding step (16 rows of one token each over a 32-token cache) timed
in a thread of its own, then again while another thread of the process sits idle after one large product, computed
on PyTorch's count of threads or on one (workers/threads.py: threads_here), and once such a thread has ended. The
median of `--steps` steps each, in milliseconds. docs/decisions.md: "A preview computes on one thread"."""
from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable

import torch

from core.model.loader import load_model
from core.settings import Settings
from workers.threads import on_every_core, threads_here


def step_ms(model: torch.nn.Module, steps: int) -> float:
    """The median time of one decoding step of 16 rows."""
    with torch.inference_mode():
        cache = model(input_ids=torch.randint(0, 1000, (16, 32)), use_cache=True).cache
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            model(input_ids=torch.randint(0, 1000, (16, 1)), cache=cache, use_cache=False)
            times.append(time.perf_counter() - started)
    return round(1000 * statistics.median(times), 1)


def beside(idle_after: Callable[[], None], measure: Callable[[], float]) -> float:
    """`measure()` while another thread, having run `idle_after`, waits."""
    ran, done = threading.Event(), threading.Event()

    def other() -> None:
        idle_after()
        ran.set()
        done.wait()

    thread = threading.Thread(target=other)
    thread.start()
    ran.wait()
    try:
        return measure()
    finally:
        done.set()
        thread.join()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench openmp-teams")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)
    # Loaded in a thread that ends, as `ckl serve` loads it: a thread alive with a team would count in every row.
    model = on_every_core(lambda: load_model(Settings(), progress=lambda message: None).model)

    def compute_once(threads: int | None) -> Callable[[], None]:
        """One large product, on `threads` threads (None: PyTorch's count)."""
        def run() -> None:
            if threads is not None:
                threads_here(threads)
            square = torch.randn(2048, 2048)
            torch.mm(square, square)
        return run

    def measure() -> float:
        return step_ms(model, args.steps)

    def after_one_ended() -> float:
        on_every_core(compute_once(None))
        return measure()

    print(f"PyTorch's threads: {torch.get_num_threads()}")
    rows = (("alone", measure),
            ("beside an idle thread that computed on PyTorch's count", lambda: beside(compute_once(None), measure)),
            ("beside an idle thread that computed on one thread", lambda: beside(compute_once(1), measure)),
            ("after a thread that computed on PyTorch's count has ended", after_one_ended),
            ("alone again", measure))
    for name, run in rows:
        print(f"{name:<60} {on_every_core(run):>7} ms a step")
