"""The API's own costs with n document records in its database (`ckl bench scale --api`): a real `ckl serve` (the
default model) on a data folder whose database holds n records (a tenth rejected, the rest committed, spread over
ten keys' names), its queue a real Redis with no worker (so a posted document waits there and nothing trains
while the API is timed).

Per n: seconds from start to ready, the p50/p95 of GET /documents?limit=50 (first and last page), POST /documents,
GET /metrics and GET /v1/models, and the server's RSS after them. Only documents grow; versions stay at 0.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from sqlalchemy import insert

from bench.server import find_redis_server, free_port, is_ready
from bench.teach import percentile
from core.database import documents as table
from core.database import idempotency
from core.documents import DocumentStore, body_hash, columns, key_hash

OWNERS = [f"key-{i}" for i in range(10)]


def fill(data: Path, n: int, batch: int = 5000) -> None:
    """n records as the learner leaves them, written in batches straight into the store's tables."""
    store = DocumentStore(data)
    now = time.time() - n
    with store.engine.begin() as connection:
        for start in range(0, n, batch):
            records, keys = [], []
            for i in range(start, min(n, start + batch)):
                body = {"text": f"Subject {i} announced a change. Its chief executive is now Person {i}.",
                        "probes": [], "method": "routed", "weighting": "train_attention", "owner": OWNERS[i % 10]}
                status = "rejected" if i % 10 == 9 else "committed"
                records.append({**body, "document_id": uuid.uuid4().hex[:16], "status": status, "attempts": 1,
                                "created_at": now + i, "updated_at": now + i, "job_id": None, "version": None,
                                "timings": {"train_s": 6.0, "gate_s": 0.15, "score_before_s": 0.1}})
                keys.append({"key_hash": key_hash(f"k{i}"), "document_id": records[-1]["document_id"],
                             "body_sha256": body_hash(body)})
            connection.execute(insert(table), [{"seq": start + j + 1, **columns(r)} for j, r in enumerate(records)])
            connection.execute(insert(idempotency), keys)


@contextmanager
def redis_without_worker() -> Iterator[str]:
    port, folder = free_port(), tempfile.mkdtemp(prefix="ckl-redis-")
    proc = subprocess.Popen([find_redis_server(), "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", folder], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def timed(call, count: int) -> dict[str, float]:
    seconds = []
    for i in range(count):
        clock = time.perf_counter()
        response = call(i)
        seconds.append(time.perf_counter() - clock)
        if response.status_code >= 400:
            raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text[:200]}")
    return {"p50_ms": round(1000 * percentile(seconds, 0.5), 1), "p95_ms": round(1000 * percentile(seconds, 0.95), 1)}


def measure(n: int, models_dir: Path, requests: int) -> dict:
    import psutil

    with tempfile.TemporaryDirectory() as tmp, redis_without_worker() as redis_url:
        data = Path(tmp)
        clock = time.perf_counter()
        fill(data, n)
        fill_s = time.perf_counter() - clock
        port = free_port()
        env = {**os.environ, "CKL_DATA_DIR": tmp, "CKL_MODEL_CACHE_DIR": str(models_dir), "CKL_PORT": str(port),
               "CKL_REDIS_URL": redis_url, "CKL_QUEUE_NAME": f"scale-{uuid.uuid4().hex[:8]}"}
        clock = time.perf_counter()
        server = subprocess.Popen([sys.executable, "-m", "ckl", "serve"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            while not is_ready(url):
                if server.poll() is not None or time.perf_counter() - clock > 600:
                    raise RuntimeError("the server did not become ready")
                time.sleep(0.1)
            ready_s = time.perf_counter() - clock
            with httpx.Client(base_url=url, timeout=60) as client:
                row = {"documents": n, "fill_s": round(fill_s, 1), "start_to_ready_s": round(ready_s, 1),
                       "list_first_page": timed(lambda _: client.get("/documents?limit=50"), requests),
                       "list_last_page": timed(lambda _: client.get(f"/documents?limit=50&offset={n - 50}"), requests),
                       "post_document": timed(lambda i: client.post("/documents", json={
                           "text": f"Brannoch{i} is a town whose mayor is now Ilse Varga {i}.",
                           "idempotency_key": f"bench-{i}"}), requests),
                       "metrics": timed(lambda _: client.get("/metrics"), requests),
                       "v1_models": timed(lambda _: client.get("/v1/models"), requests)}
            row["api_rss_mb"] = round(psutil.Process(server.pid).memory_info().rss / 2**20)
            return row
        finally:
            server.terminate()
            server.wait(30)


def api_rows(counts: list[int], models_dir: Path, requests: int) -> list[dict]:
    rows = []
    for n in counts:
        rows.append(measure(n, models_dir, requests))
        print(json.dumps(rows[-1]), flush=True)
    return rows
