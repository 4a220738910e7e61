"""`ckl bench dtype`: bf16 against fp32 on the CPU, the served model in-process: NF accuracy (the NF suite as
fp32 calibrates it, and the whole shipped probe pool), greedy tokens/s of one request alone, and aggregate
tokens/s of 16 requests decoded together by the batch scheduler. `CKL_DTYPE=bfloat16` is the setting; fp32
stays the default unless the NF accuracies are equal (docs/decisions.md: fp32 on the CPU)."""
from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

import torch

import methods  # noqa: F401  (registers every method folder: the served model is the server's)
from bench.serve import PROMPTS
from core.model.loader import load_model
from core.model.served_model import ServingModel
from core.probes import shipped_pool
from core.scoring import accuracy, score_probes
from core.settings import Settings
from research.provenance import RESULTS_ROOT, git_commit
from serving.batching import Scheduler
from serving.generation import SamplingParams, generate


def batched_tokens_per_s(serving: ServingModel, prompts: list[list[int]], params: SamplingParams) -> float:
    scheduler = Scheduler(serving, len(prompts))
    results: list[Any] = []

    def ask(ids: list[int]) -> None:
        *_, generation = scheduler.stream(ids, params)
        results.append(generation)
    threads = [threading.Thread(target=ask, args=(ids,)) for ids in prompts]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(g.completion_tokens for g in results) / (time.perf_counter() - started)


def measure(dtype: str, tokens: int, clients: int, nf_suite: list | None) -> dict[str, Any]:
    settings = Settings(dtype=dtype)
    loaded = load_model(settings)
    pool = shipped_pool()
    pool_scores = score_probes(loaded.model, loaded.tokenizer, pool)
    kept = [p for p, s in zip(pool, pool_scores) if s == 1.0]
    suite = nf_suite if nf_suite is not None else kept
    suite_scores = dict(zip(pool, pool_scores))
    serving = ServingModel(loaded, settings)
    prompts = [loaded.tokenizer(PROMPTS[i % len(PROMPTS)])["input_ids"] for i in range(clients)]
    params = SamplingParams(max_new_tokens=tokens)
    generate(serving, prompts[0], SamplingParams(max_new_tokens=4))  # warm-up
    alone = [generate(serving, ids, params) for ids in prompts[:4]]
    return {"dtype": dtype, "pool_acc": accuracy(pool_scores), "pool_kept": len(kept),
            "nf_acc_on_fp32_suite": accuracy([suite_scores[p] for p in suite]), "nf_suite_size": len(suite),
            "alone_tokens_per_s": sum(g.completion_tokens for g in alone) / sum(g.timing["total_s"] for g in alone),
            f"batched_{clients}_tokens_per_s": batched_tokens_per_s(serving, prompts, params),
            "kept": kept}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench dtype")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--out", type=Path, default=RESULTS_ROOT / "dtype")
    args = parser.parse_args(argv)
    fp32 = measure("float32", args.tokens, args.clients, None)
    bf16 = measure("bfloat16", args.tokens, args.clients, fp32["kept"])
    rows = [{k: v for k, v in r.items() if k != "kept"} for r in (fp32, bf16)]
    report = {"command": "ckl bench dtype " + " ".join(argv), "git_commit": git_commit(),
              "threads": torch.get_num_threads(), "tokens": args.tokens, "results": rows,
              "kept_by_one_only": sorted({p.prompt for p in fp32["kept"]} ^ {p.prompt for p in bf16["kept"]})}
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=2))
    for row in rows:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}))
    print(f"probes kept by one dtype only: {len(report['kept_by_one_only'])}; written to {out}")
