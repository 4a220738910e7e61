"""`ckl bench api-overhead`: what API keys cost a request, over HTTP, on the default model: the same server
with and without keys, `/generate` of one token and `/health` (the guard and the metrics middleware, which
both servers run), median of many requests, the two servers asked in turn."""
from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx

from bench.server import running_server
from service.auth import hash_key

KEY = "bench-key"


def timed(url: str, method: str, path: str, headers: dict[str, str], body: dict | None) -> float:
    started = time.perf_counter()
    response = httpx.request(method, f"{url}{path}", json=body, headers=headers, timeout=120)
    assert response.status_code == 200, response.text
    return time.perf_counter() - started


def main(argv: list[str]) -> None:
    from service.model.loader import default_model_path
    from service.settings import Settings

    parser = argparse.ArgumentParser(prog="ckl bench api-overhead")
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args(argv)
    models = Settings().models_dir
    default_model_path(models)
    keys = json.dumps([{"name": "bench", "sha256": hash_key(KEY), "scopes": ["admin"]}])
    asks = {"/generate": ("POST", {"prompt": "The capital of France is", "max_new_tokens": 1}),
            "/health": ("GET", None)}
    seconds: dict[str, dict[str, list[float]]] = {"open": {p: [] for p in asks}, "keys": {p: [] for p in asks}}
    with running_server(models) as open_url, running_server(models, env={"CKL_API_KEYS": keys}) as keyed_url:
        servers = {"open": (open_url, {}), "keys": (keyed_url, {"Authorization": f"Bearer {KEY}"})}
        for url, headers in servers.values():  # warm-up
            timed(url, "POST", "/generate", headers, asks["/generate"][1])
        for _ in range(args.requests):
            for name, (url, headers) in servers.items():
                for path, (method, body) in asks.items():
                    seconds[name][path].append(timed(url, method, path, headers, body))
    for path in asks:
        open_ms = 1000 * statistics.median(seconds["open"][path])
        keyed_ms = 1000 * statistics.median(seconds["keys"][path])
        print(f"{path}: median {open_ms:.2f} ms open, {keyed_ms:.2f} ms with keys: ratio {keyed_ms / open_ms:.3f} "
              f"({args.requests} requests each)")
