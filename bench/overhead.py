"""`ckl bench api-overhead`: what API keys and metrics cost a request, over HTTP, on the default model. Three
servers: neither (CKL_METRICS=false, no keys), metrics only, metrics and keys; `/generate` of one token and
`/health`, median of many requests, the servers asked in turn, each compared with the first."""
from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import ExitStack

import httpx

from bench.server import running_server
from core.keys import hash_key

KEY = "bench-key"


def timed(url: str, method: str, path: str, headers: dict[str, str], body: dict | None) -> float:
    started = time.perf_counter()
    response = httpx.request(method, f"{url}{path}", json=body, headers=headers, timeout=120)
    assert response.status_code == 200, response.text
    return time.perf_counter() - started


def main(argv: list[str]) -> None:
    from core.model.loader import default_model_path
    from core.settings import Settings

    parser = argparse.ArgumentParser(prog="ckl bench api-overhead")
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args(argv)
    models = Settings().models_dir
    default_model_path(models)
    keys = json.dumps([{"name": "bench", "sha256": hash_key(KEY), "scopes": ["admin"]}])
    asks = {"/generate": ("POST", {"prompt": "The capital of France is", "max_new_tokens": 1}),
            "/health": ("GET", None)}
    configs = {"neither": ({"CKL_METRICS": "false"}, {}), "metrics": ({}, {}),
               "metrics+keys": ({"CKL_API_KEYS": keys}, {"Authorization": f"Bearer {KEY}"})}
    seconds = {name: {p: [] for p in asks} for name in configs}
    with ExitStack() as stack:
        servers = {name: (stack.enter_context(running_server(models, env=env)), headers)
                   for name, (env, headers) in configs.items()}
        for url, headers in servers.values():  # warm-up
            timed(url, "POST", "/generate", headers, asks["/generate"][1])
        for _ in range(args.requests):
            for name, (url, headers) in servers.items():
                for path, (method, body) in asks.items():
                    seconds[name][path].append(timed(url, method, path, headers, body))
    for path in asks:
        base_ms = 1000 * statistics.median(seconds["neither"][path])
        rest = ", ".join(f"{name} {1000 * statistics.median(seconds[name][path]):.2f} ms "
                         f"(ratio {statistics.median(seconds[name][path]) * 1000 / base_ms:.3f})"
                         for name in list(configs)[1:])
        print(f"{path}: median neither {base_ms:.2f} ms, {rest} ({args.requests} requests each)")
