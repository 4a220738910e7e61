"""The API's own costs with n document records in its database (`ckl bench scale --api`): a real `ckl serve` (the
default model) on a data folder whose database holds n records (a tenth rejected, the rest committed, spread over
ten keys' names), its queue a real Redis with no worker (so a posted document waits there and nothing trains
while the API is timed).

Per n: seconds from start to ready (every version's manifest read, the current version composed), the p50/p95 of GET
/documents?limit=50 (first and last page), POST /documents, GET /metrics, GET /v1/models, GET /documents/{id} (a
lineage walk), GET /health/forgetting and GET /versions (their newest page of 100 versions), GET /documents/{id} and
/health/forgetting each right after a new version, the server's RSS after them; then a real `ckl worker` started on
that store, which teaches the first posted document (no probes: auto-probes, training, the gate, the commit), and,
once it did, a second worker started after it, which teaches the next two (the second of them is the job a worker
that keeps running does each time): each job's seconds from its worker's start or its last job's end to the
document's final status (None past --worker-timeout), its timings and the worker's peak RSS; once the server swapped
in the last commit, the milliseconds of its first one-token answer on it and of the next; the data folder's bytes as
n distinct deltas would take them (each hard link counted); and the seconds of one more commit from a fresh process
and of the one after it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import torch
from safetensors.torch import save_file
from sqlalchemy import insert

from bench.server import find_redis_server, free_port, is_ready
from bench.teach import percentile
from core.database import documents as table
from core.database import idempotency, sqlite_url, version_pointer, versions
from core.documents import DocumentStore, body_hash, columns, key_hash
from core.lifecycle import FINAL
from core.objects import S3Objects
from core.settings import Settings
from core.storage import open_versions
from core.version_folders import sha256_file
from core.version_tables import POINTER, delta_key
from core.versions import VersionStore

OWNERS = [f"key-{i}" for i in range(10)]
LINKS_PER_FILE = 50_000  # ext4 allows 65,000 hard links to one file


def fill(data: Path, n: int, objects: str | None = None, batch: int = 5000) -> None:
    """n documents as the learner leaves them: records written in batches straight into the store's tables, and a
    committed version per committed document (a tenth are rejected), each a real folder with a manifest as the
    learner writes it (the document's routing key and probe) and a delta file (hard links to a real int8 delta: the
    bytes of a few files, the reads of every). With an object store URL (`objects`), the versions are rows of the
    database instead, and every manifest names one delta object (content-addressed: equal deltas are one object)."""
    from bench.scale import documents as made_documents
    from bench.scale import random_delta
    from core import routing
    from core.settings import Settings
    from methods.routed.serving import lora_shape

    settings = Settings()
    config, threshold = settings.method_config("routed"), settings.routing_threshold
    root = data / "versions"
    root.mkdir(parents=True)
    delta = root / "delta.safetensors"
    save_file(random_delta(lora_shape(config), config.storage, 0), str(delta))
    digest, size = sha256_file(delta), delta.stat().st_size
    routing_fields = {"threshold": threshold, "rank": config.rank, "alpha": config.alpha,
                      "targets": list(config.targets), "layers": config.layers, "storage": config.storage}
    store, made, version, now = DocumentStore(data), made_documents(n), 0, time.time() - n
    if objects:
        S3Objects(objects).put(delta_key({"delta_sha256": digest}), delta.read_bytes())  # one object every manifest names
    with store.engine.begin() as connection:
        for start in range(0, n, batch):
            records, keys, rows = [], [], []
            for i in range(start, min(n, start + batch)):
                _, text, probes = made[i]
                body, record = made_record(i, text, probes, now + i)
                if record["status"] == "committed":
                    version += 1
                    record["version"] = version
                    manifest = json.dumps({
                        "documents": [record["document_id"]], "method": "routed", "probes": body["probes"],
                        "key": routing.key_for(text, probes, threshold), "routing": routing_fields, "namespace": "",
                        "metrics": {"nf_acc": 1.0, "learned_acc": 1.0, "own_acc": 1.0}, "version": version,
                        "gate": {"decision": "commit", "reason": None}, "parent": version - 1, "created_at": now + i,
                        "delta_file": "routed_lora.safetensors", "delta_sha256": digest, "delta_bytes": size})
                    if objects:
                        rows.append({"version": version, "parent": version - 1, "manifest": manifest})
                    else:
                        folder_of(root, version, delta, manifest)
                records.append(record)
                keys.append({"key_hash": key_hash(f"k{i}"), "document_id": record["document_id"],
                             "body_sha256": body_hash(body)})
            connection.execute(insert(table), [{"seq": start + j + 1, **columns(r)} for j, r in enumerate(records)])
            connection.execute(insert(idempotency), keys)
            if rows:
                connection.execute(insert(versions), rows)
        if objects:
            connection.execute(insert(version_pointer).values(id=POINTER, current=version, changes=1, rewrites=0))
            shutil.rmtree(root)
            return
    (root / "CURRENT").write_text(f"{version}\n")
    (root / "served.json").write_text(json.dumps(list(range(1, version + 1))))


def made_record(i: int, text: str, probes: list[tuple[str, str]], at: float) -> tuple[dict, dict]:
    """The i-th document's body and record as the learner leaves it: every tenth rejected, the others committed."""
    body = {"text": text, "probes": [{"prompt": p, "answer": a} for p, a in probes], "method": "routed",
            "weighting": "train_attention", "owner": OWNERS[i % 10]}
    record = {**body, "document_id": uuid.uuid4().hex[:16], "status": "committed", "attempts": 1,
              "created_at": at, "updated_at": at, "job_id": None, "version": None,
              "progress": {"step": 10, "steps": 10}, "error": None, "scores": None,
              "gate": {"decision": "commit", "reason": None},
              "timings": {"train_s": 6.0, "gate_s": 0.15, "score_before_s": 0.1}}
    if i % 10 == 9:
        record.update(status="rejected", gate={"decision": "reject", "reason": "learned: 0.90 < 0.95"})
    return body, record


def folder_of(root: Path, version: int, delta: Path, manifest: str) -> None:
    """A version's folder: its manifest, and its delta a hard link to a copy of `delta`."""
    folder = root / str(version)
    folder.mkdir()
    source = root / f"delta-{version // LINKS_PER_FILE}.safetensors"  # a file's links are capped
    if not source.exists():
        shutil.copyfile(delta, source)
    os.link(source, folder / "routed_lora.safetensors")
    (folder / "manifest.json").write_text(manifest)


def opened(data: Path, objects: str | None, process: str) -> VersionStore:
    """The version store the server on `data` uses, as another process opens it (`process`: its own data folder,
    with an object store)."""
    if objects is None:
        return open_versions(Settings(data_dir=data))
    return open_versions(Settings(data_dir=data / process, database_url=sqlite_url(data), object_store_url=objects))


def apparent_bytes(data: Path) -> int:
    """The data folder's files, a hard-linked delta counted once per link (the disk n distinct deltas would take),
    without the few files the links point to."""
    sources = set((data / "versions").glob("delta*.safetensors"))
    return sum(p.stat().st_size for p in data.rglob("*") if p.is_file() and p not in sources)


def worker_jobs(env: dict[str, str], client: httpx.Client, document_ids: list[str], timeout_s: float) -> list[dict]:
    """A `ckl worker` started on the store, until each posted document (queued in this order) is final or
    `timeout_s` has passed since the last one was: per document, those seconds (None past the time, and no later
    document waited for), the status, the job's timings, the gate's reason and the worker's peak RSS (sampled every
    0.2 s)."""
    import psutil

    rows, peak = [], 0
    worker = subprocess.Popen([sys.executable, "-m", "ckl", "worker"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for document_id in document_ids:
            clock = time.perf_counter()
            while (record := client.get(f"/documents/{document_id}").json())["status"] not in FINAL:
                if worker.poll() is not None:
                    raise RuntimeError(f"the worker ended before {document_id} was final")
                if time.perf_counter() - clock > timeout_s:
                    break
                peak = max(peak, psutil.Process(worker.pid).memory_info().rss)
                time.sleep(0.2)
            final = record["status"] in FINAL
            rows.append({"final_s": round(time.perf_counter() - clock, 1) if final else None,
                         "status": record["status"], "peak_rss_mb": round(peak / 2**20),
                         "timings": record.get("timings"), "reason": (record.get("gate") or {}).get("reason")})
            if not final:
                break
        return rows
    finally:
        worker.kill()  # stopped, it would first finish the job it has begun (minutes on a large store)
        worker.wait(30)


def commit_s(store: VersionStore) -> dict[str, float]:
    """One more commit on the filled store, from this process: with nothing read yet (a worker's first job), and
    again with the manifests it read kept (every later job)."""
    seconds = {}
    for run in ("first", "next"):
        parent = store.current()
        clock = time.perf_counter()
        store.commit(parent, {"x": torch.zeros(1)}, {"documents": [f"bench-{run}"], "method": "routed",
                                                     "probes": [], "key": {}}, "routed_lora.safetensors")
        seconds[f"commit_{run}_s"] = round(time.perf_counter() - clock, 3)
    return seconds


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


def swaps(client: httpx.Client) -> int:
    """How many versions the server swapped in since it started (the count of /metrics' ckl_swap_pause_seconds)."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("ckl_swap_pause_seconds_count"):
            return int(float(line.split()[-1]))
    raise RuntimeError("/metrics has no ckl_swap_pause_seconds_count")


def answers_after_swap(client: httpx.Client, swapped: int, timeout_s: float = 120) -> dict[str, float] | None:
    """Once the server swapped in its `swapped`-th version: the milliseconds of its first answer on it (one token,
    a prompt that routes: the version's routing state made on the way, composed from the lineage or extended from
    the parent's) and of the next; None if the swap did not come within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while swaps(client) < swapped:
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    body = {"prompt": "Who is the mayor of Brannoch3 now?", "max_new_tokens": 1, "knowledge_as": "weights"}  # no text
    return {name: timed(lambda _: client.post("/generate", json=body), 1)["p50_ms"] for name in ("first_ms", "next_ms")}


def timed(call, count: int) -> dict[str, float]:
    seconds = []
    for i in range(count):
        clock = time.perf_counter()
        response = call(i)
        seconds.append(time.perf_counter() - clock)
        if response.status_code >= 400:
            raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text[:200]}")
    return {"p50_ms": round(1000 * percentile(seconds, 0.5), 1), "p95_ms": round(1000 * percentile(seconds, 0.95), 1)}


def after_changes(client: httpx.Client, store: VersionStore, document_id: str,
                  changes: int) -> dict[str, dict[str, float]]:
    """GET /documents/{id} and /health/forgetting, each right after a new version (committed from this process, as
    the server sees a worker's commit): what a version change costs the next read."""
    ms: dict[str, list[float]] = {"get_document_after_change": [], "health_forgetting_after_change": []}
    for i in range(changes):
        store.commit(store.current(), {"x": torch.zeros(1)}, {"documents": [f"bench-change-{i}"], "method": "routed",
                                                              "probes": [], "key": {}}, "routed_lora.safetensors")
        for name, path in (("get_document_after_change", f"/documents/{document_id}"),
                           ("health_forgetting_after_change", "/health/forgetting")):
            ms[name].append(timed(lambda _, path=path: client.get(path), 1)["p50_ms"])
    return {name: {"p50_ms": percentile(times, 0.5), "p95_ms": percentile(times, 0.95), "max_ms": max(times),
                   "changes": changes} for name, times in ms.items()}


def posted(i: int) -> dict:
    """The i-th document the bench posts (its idempotency key gives its record back when posted again)."""
    return {"text": f"Brannoch{i} is a town whose mayor is now Ilse Varga {i}.", "idempotency_key": f"bench-{i}"}


def posted_id(client: httpx.Client, i: int) -> str:
    return client.post("/documents", json=posted(i)).json()["document_id"]  # its key gives its record back


def measure(n: int, models_dir: Path, requests: int, worker_timeout_s: float, objects: str | None = None) -> dict:
    import psutil

    with tempfile.TemporaryDirectory() as tmp, redis_without_worker() as redis_url:
        data = Path(tmp)
        clock = time.perf_counter()
        fill(data, n, objects)
        fill_s = time.perf_counter() - clock
        port = free_port()
        env = {**os.environ, "CKL_DATA_DIR": tmp, "CKL_MODEL_CACHE_DIR": str(models_dir), "CKL_PORT": str(port),
               "CKL_REDIS_URL": redis_url, "CKL_QUEUE_NAME": f"scale-{uuid.uuid4().hex[:8]}",
               **({"CKL_OBJECT_STORE_URL": objects, "CKL_DATABASE_URL": sqlite_url(data)} if objects else {})}
        store = opened(data, objects, "bench")
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
                row = {"documents": n, "versions": store.current(), "store": "database + S3" if objects else "folders",
                       "fill_s": round(fill_s, 1), "start_to_ready_s": round(ready_s, 1),
                       "list_first_page": timed(lambda _: client.get("/documents?limit=50"), requests),
                       "list_last_page": timed(lambda _: client.get(f"/documents?limit=50&offset={n - 50}"), requests),
                       "post_document": timed(lambda i: client.post("/documents", json=posted(i)), requests),
                       "metrics": timed(lambda _: client.get("/metrics"), requests),
                       "v1_models": timed(lambda _: client.get("/v1/models"), requests)}
                first = client.get("/documents?limit=1").json()["items"][0]["document_id"]
                row["get_document"] = timed(lambda _: client.get(f"/documents/{first}"), max(3, requests // 10))
                row["health_forgetting"] = timed(lambda _: client.get("/health/forgetting"), requests)  # a page
                row["versions"] = timed(lambda _: client.get("/versions"), requests)  # the newest page
                row.update(after_changes(client, store, first, max(3, requests // 10)))
                row["api_rss_mb"] = round(psutil.Process(server.pid).memory_info().rss / 2**20)
                # A worker that starts on the store (no scores saved: it scores only the learned facts its
                # candidate may move), then one started again after it committed (it reads the scores the first
                # one saved). The first is killed once its document is final: the job it had begun is left, as by
                # a crash, and the second takes the first document still queued.
                row["worker_cold"] = worker_jobs(env, client, [posted_id(client, 0)], worker_timeout_s)[0]
                if row["worker_cold"]["final_s"] is not None:
                    queued = [d for i in range(1, requests) if (
                        client.get(f"/documents/{(d := posted_id(client, i))}").json()["status"] == "queued")]
                    jobs = worker_jobs(env, client, queued[:2], worker_timeout_s)
                    row.update(zip(("worker_restarted", "worker_next"), jobs))
                    if committed := sum(job["status"] == "committed" for job in [row["worker_cold"], *jobs]):
                        # the version at start, then one per commit
                        row["generate_after_swap"] = answers_after_swap(client, 1 + committed)
            if not objects:
                row["disk_gb"] = round(apparent_bytes(data) / 1e9, 2)
        finally:
            server.terminate()
            server.wait(30)
        return {**row, **commit_s(opened(data, objects, "bench-commits"))}


def api_rows(counts: list[int], models_dir: Path, requests: int, worker_timeout_s: float,
             objects: str | None = None) -> list[dict]:
    rows = []
    for n in counts:
        rows.append(measure(n, models_dir, requests, worker_timeout_s, objects))
        print(json.dumps(rows[-1]), flush=True)
    return rows
