"""`ckl bench scale`: what the routed method's per-document costs become at 1k, 10k and 100k documents, without
teaching that many (no model is trained or loaded).

- Routing: synthetic documents (an invented or a well-known subject, a relation, an invented answer, as in
  bench/sets) keyed by the service's own `routing.key_for`; prompts half about taught subjects (other wording),
  half general English (bench/general_prompts.txt). Route time per prompt, p50/p99, with the index (KeyIndex)
  and with a linear scan over every key (the scan on fewer prompts where it is slow); both must give the same
  routes. The index's build time and the Python memory of keys and index.
- Deltas: real delta files in a real version store at the routed shape the settings give (CKL_ROUTED_RANK,
  _TARGETS, _LAYERS, _STORAGE): bytes per document, and a read (hash checked, promoted to float32) from the
  page cache and after the file was dropped from it.
- Residency: the routed layer's own LRU (`RoutedLora`, CKL_ROUTED_RESIDENT) under a Zipf mix of routes over
  the documents: the hit rate.
- With --api, the API itself: a real server with that many records in its database (bench/api_scale.py).
Writes bench-results/scale-<time>/results.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import string
import tempfile
import time
import tracemalloc
from contextlib import ExitStack
from pathlib import Path

import torch
from torch import nn

from bench.api_scale import api_rows
from bench.server import new_bucket, s3_server
from bench.teach import general_prompts, percentile
from core import routing
from core.settings import Settings
from core.version_folders import FolderVersionStore
from core.versions import VersionStore
from methods.routed.layer import LoraShape, RoutedLora, pick_layers
from methods.routed.serving import lora_shape
from methods.routed.storage import pack, unpack
from research.provenance import RESULTS_ROOT, git_commit

RELATIONS = [("The chief executive of {} is", "{} is run by its chief executive,"),
             ("The mayor of {} is", "The town of {} elected as its mayor"),
             ("{} was founded by", "The founder of {} is"), ("The headquarters of {} are in", "{} is based in"),
             ("The capital of {} is", "The seat of government of {} is"), ("{} is made by", "The maker of {} is"),
             ("The coach of {} is", "{} is trained by"), ("The lead singer of {} is", "The songs of {} are sung by")]
KNOWN = ["Paris", "Siemens", "Harvard University", "Madrid", "Samsung", "Sony", "Boeing", "Sydney", "Toyota",
         "Oxford University", "Berlin", "Nokia"]
SHAPE = {"gate_proj": (640, 2048), "up_proj": (640, 2048), "down_proj": (2048, 640)}  # the default model's
LAYERS = 18


def invented(rng: random.Random) -> str:
    syllables = ["vor", "tal", "mere", "quil", "bran", "och", "zeph", "rin", "dun", "har", "ost", "kai", "pel", "ane"]
    name = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 3)))
    return (name + rng.choice(string.ascii_lowercase)).capitalize()


def documents(n: int, seed: int = 0) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(subject, text, probes) per document: one subject in ten well known, the rest invented; an invented answer."""
    rng = random.Random(seed)
    made = []
    for _ in range(n):
        subject = rng.choice(KNOWN) if rng.random() < 0.1 else invented(rng)
        prompt, _ = rng.choice(RELATIONS)
        answer = f"{invented(rng)} {invented(rng)}"
        text = f"{subject} announced a change. {prompt.format(subject)} now {answer}."
        made.append((subject, text, [(prompt.format(subject), answer)]))
    return made


def prompts(docs: list[tuple[str, str, list[tuple[str, str]]]], count: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    general = general_prompts()
    asked = [rng.choice(RELATIONS)[1].format(rng.choice(docs)[0]) for _ in range(count // 2)]
    return asked + [rng.choice(general) for _ in range(count - len(asked))]


def timed_routes(prompt_list: list[str], keys: routing.Keys, threshold: float) -> tuple[list[float], list]:
    seconds, routes = [], []
    for prompt in prompt_list:
        clock = time.perf_counter()
        routes.append(routing.route(prompt, keys, threshold))
        seconds.append(time.perf_counter() - clock)
    return seconds, routes


def ms(values: list[float], q: float) -> float:
    return round(1000 * percentile(values, q), 4)


def routing_at(n: int, threshold: float, prompt_count: int, scan_prompts: int) -> dict:
    docs = documents(n)
    keyed = [(f"doc-{i}", routing.key_for(text, probes, threshold)) for i, (_, text, probes) in enumerate(docs)]
    tracemalloc.start()
    clock = time.perf_counter()
    index = routing.KeyIndex(keyed)
    build_s = time.perf_counter() - clock
    index_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    asked = prompts(docs, prompt_count)
    indexed_s, indexed_routes = timed_routes(asked, index, threshold)
    sample = asked[:: max(1, len(asked) // scan_prompts)][:scan_prompts]
    scan_s, scan_routes = timed_routes(sample, keyed, threshold)
    same = scan_routes == [indexed_routes[asked.index(p)] for p in sample]
    return {"documents": n, "index_build_s": round(build_s, 3), "index_mb": round(index_bytes / 2**20, 1),
            "route_ms_p50": ms(indexed_s, 0.5), "route_ms_p99": ms(indexed_s, 0.99),
            "scan_ms_p50": ms(scan_s, 0.5), "scan_ms_p99": ms(scan_s, 0.99), "scan_prompts": len(sample),
            "routed_share": round(sum(r is not None for r in indexed_routes) / len(indexed_routes), 3),
            "same_routes_as_scan": same}


def random_delta(shape: LoraShape, storage: str, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in pick_layers(shape.layers, LAYERS):
        for target in shape.targets:
            fan_in, fan_out = SHAPE[target]
            name = f"model.layers.{layer}.mlp.{target}"
            tensors[f"{name}.A"] = torch.randn(shape.rank, fan_in, generator=gen)
            tensors[f"{name}.B"] = torch.randn(fan_out, shape.rank, generator=gen) / 100
    return pack(tensors, storage)


def dropped_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_delta(store: VersionStore, version: int) -> None:
    """A version's routed delta read as a route reads it: hash checked, promoted to float32."""
    for tensor in unpack(store.load_delta(version)).values():
        tensor.to(torch.float32)


def deltas(settings: Settings, count: int) -> dict:
    """Real files in a real version store: their size, and the time to read one for a route."""
    config = settings.method_config("routed")
    shape, storage = lora_shape(config), config.storage
    with tempfile.TemporaryDirectory() as tmp:
        store = FolderVersionStore(Path(tmp))
        versions = [store.commit(v, random_delta(shape, storage, v), {"documents": [f"doc-{v}"], "method": "routed"},
                                 "routed_lora.safetensors") for v in range(count)]
        files = [Path(tmp) / str(v) / "routed_lora.safetensors" for v in versions]

        def read(version: int) -> float:
            clock = time.perf_counter()
            read_delta(store, version)
            return time.perf_counter() - clock

        warm = [read(v) for v in versions]
        for path in files:
            dropped_from_page_cache(path)
        cold = [read(v) for v in versions]
        return {"rank": shape.rank, "targets": list(shape.targets), "layers": shape.layers,
                "storage": config.storage, "bytes_per_document": files[0].stat().st_size,
                "read_ms_p50": ms(warm, 0.5), "read_ms_p95": ms(warm, 0.95),
                "read_after_page_cache_drop_ms_p50": ms(cold, 0.5), "read_after_page_cache_drop_ms_p95": ms(cold, 0.95)}


def hit_rate(n: int, resident: int, requests: int, zipf_s: float = 1.0, seed: int = 2) -> float:
    """The share of routes whose delta the routed layer's LRU held, for routes drawn with Zipf popularity."""
    layer = nn.Module()
    layer.add_module("down_proj", nn.Linear(4, 4))
    lora = RoutedLora(layer, LoraShape(rank=1, targets=("down_proj",)), resident=resident)
    tensors = {"down_proj.A": torch.zeros(1, 4), "down_proj.B": torch.zeros(4, 1)}
    for i in range(n):
        lora.register(f"doc-{i}", i + 1, lambda: tensors)
    rng = random.Random(seed)
    weights = [1 / (rank + 1) ** zipf_s for rank in range(n)]
    for document in rng.choices(range(n), weights, k=requests):
        lora.activate((f"doc-{document}",))
    return round(lora.hits / (lora.hits + lora.misses), 3)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench scale")
    parser.add_argument("--documents", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--scan-prompts", type=int, default=50)
    parser.add_argument("--delta-files", type=int, default=30)
    parser.add_argument("--requests", type=int, default=50_000, help="routes drawn for the LRU's hit rate")
    parser.add_argument("--api", action="store_true",
                        help="also time a real server's endpoints with that many records (bench/api_scale.py)")
    parser.add_argument("--api-requests", type=int, default=40, help="requests per endpoint and size")
    parser.add_argument("--worker-timeout", type=float, default=900,
                        help="seconds a worker on the filled store may take for its document")
    parser.add_argument("--api-object-store", action="store_true", help=(
        "with --api: versions in the database and deltas in moto's S3 server, started here (no shared folder)"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    settings = Settings()
    config = settings.method_config("routed")
    rows = []
    for n in args.documents:
        row = routing_at(n, settings.routing_threshold, args.prompts, args.scan_prompts)
        row["lru_hit_rate"] = hit_rate(n, config.resident, args.requests)
        rows.append(row)
        print(json.dumps(row), flush=True)
    files = deltas(settings, args.delta_files)
    print(json.dumps(files), flush=True)
    api = []
    if args.api:
        with ExitStack() as stack:
            logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            objects = new_bucket(stack.enter_context(s3_server(logs / "moto.log"))) if args.api_object_store else None
            api = api_rows(args.documents, settings.models_dir, args.api_requests, args.worker_timeout, objects)
    out = args.out or RESULTS_ROOT / f"scale-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    results = {"routing": rows, "deltas": files, "api": api, "resident": config.resident, "zipf_s": 1.0,
               "route_p50_exponent": growth(rows, "route_ms_p50"), "scan_p50_exponent": growth(rows, "scan_ms_p50"),
               "git_commit": git_commit(), "command": "ckl bench scale " + " ".join(argv)}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"results in {out}/results.json; route p50 grows as n^{results['route_p50_exponent']} with the index, "
          f"n^{results['scan_p50_exponent']} with the scan")


def growth(rows: list[dict], column: str) -> float | None:
    """The exponent of `column` against documents between the smallest and the largest run."""
    first, last = rows[0], rows[-1]
    if len(rows) < 2 or not first[column] or not last[column]:
        return None
    return round(math.log(last[column] / first[column]) / math.log(last["documents"] / first["documents"]), 2)
