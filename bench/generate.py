"""`ckl bench generate`: single-stream greedy tokens/s of the server over HTTP against plain
transformers `generate` on the same model in the same run, plus cold (conversion) and warm load times."""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx
import torch

from bench.server import running_server

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def plain_transformers(model_dir: Path, tokens: int, runs: int) -> tuple[float, float]:
    """Warm load seconds and tokens/s of `model.generate` (greedy, exactly `tokens` new tokens)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    load_s = time.perf_counter() - started
    ids = tokenizer(PROMPT, return_tensors="pt")
    rates = []
    with torch.inference_mode():
        model.generate(**ids, max_new_tokens=4, do_sample=False)  # warm-up
        for _ in range(runs):
            t = time.perf_counter()
            out = model.generate(**ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
            rates.append((out.shape[1] - ids["input_ids"].shape[1]) / (time.perf_counter() - t))
    return load_s, sorted(rates)[len(rates) // 2]


def over_http(models_dir: Path, tokens: int, runs: int) -> float:
    with running_server(models_dir) as url:
        body = {"prompt": PROMPT, "max_new_tokens": tokens}
        httpx.post(f"{url}/generate", json={**body, "max_new_tokens": 4}, timeout=600)  # warm-up
        rates = []
        for _ in range(runs):
            t = time.perf_counter()
            result = httpx.post(f"{url}/generate", json=body, timeout=600).json()
            rates.append(result["completion_tokens"] / (time.perf_counter() - t))
        return sorted(rates)[len(rates) // 2]


def main(argv: list[str]) -> None:
    from core.model.loader import default_model_path
    from core.settings import Settings

    parser = argparse.ArgumentParser(prog="ckl bench generate")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-cold", action="store_true", help="do not time a fresh conversion")
    args = parser.parse_args(argv)

    results: dict[str, float] = {}
    if not args.skip_cold:
        with tempfile.TemporaryDirectory() as cold:
            t = time.perf_counter()
            default_model_path(Path(cold), progress=lambda msg: None)
            results["cold_load_s (GGUF conversion)"] = time.perf_counter() - t
    models_dir = Settings().models_dir
    model_dir = default_model_path(models_dir)
    results["warm_load_s"], results["transformers_tokens_per_s"] = plain_transformers(model_dir, args.tokens, args.runs)
    results["server_http_tokens_per_s"] = over_http(models_dir, args.tokens, args.runs)
    results["ratio_server_to_transformers"] = results["server_http_tokens_per_s"] / results["transformers_tokens_per_s"]
    print(json.dumps({"tokens": args.tokens, "runs": args.runs, "threads": torch.get_num_threads(),
                      **{k: round(v, 3) for k, v in results.items()}}, indent=2))
