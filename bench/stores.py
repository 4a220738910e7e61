"""`ckl bench stores`: the two version stores side by side on routed-shaped deltas (no model is loaded): folders in
a data folder, and the database with an S3 object store (core/version_tables.py).

For each: a commit (delta written, version numbered, pointer moved), a read of a delta from the process's copy
(the page cache; the local delta cache), a read by a process that has read nothing yet (the disk; the object
store over HTTP), `current()`, and a new process's first walk of the whole lineage. The database is
--database-url (default: SQLite in a temporary folder), the object store --object-store-url (default: moto's S3
server, started here). Writes bench-results/stores-<time>/results.json.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from bench.scale import ms, random_delta, read_delta
from bench.server import new_bucket, s3_server
from core.settings import Settings
from core.storage import open_versions
from core.version_folders import FolderVersionStore
from core.versions import VersionStore
from methods.routed.serving import lora_shape


def timed(call: Callable[[], object]) -> float:
    clock = time.perf_counter()
    call()
    return time.perf_counter() - clock


def measure(name: str, fresh: Callable[[], VersionStore], settings: Settings, count: int) -> dict:
    """Commits of `count` documents in a chain, then the reads; `fresh()` opens the store as a new process would."""
    config = settings.method_config("routed")
    shape = lora_shape(config)
    store, versions, commits = fresh(), [], []
    for seed in range(count):  # from whatever the store holds already (a database given by URL may hold versions)
        delta, manifest = random_delta(shape, config.storage, seed), {"documents": [f"doc-{time.time_ns()}"],
                                                                       "method": "routed"}
        commits.append(timed(lambda: versions.append(store.commit(store.current(), delta, manifest,
                                                                  "routed_lora.safetensors"))))
    warm = [timed(lambda v=v: read_delta(store, v)) for v in versions]
    cold_store = fresh()
    cold = [timed(lambda v=v: read_delta(cold_store, v)) for v in versions]
    current = [timed(store.current) for _ in range(200)]
    lineage_s = timed(lambda: fresh().lineage(versions[-1]))
    return {"store": name, "versions": count, "bytes_per_delta": store.manifest(versions[0])["delta_bytes"],
            "commit_ms_p50": ms(commits, 0.5), "commit_ms_p95": ms(commits, 0.95),
            "read_ms_p50": ms(warm, 0.5), "read_ms_p95": ms(warm, 0.95),
            "first_read_ms_p50": ms(cold, 0.5), "first_read_ms_p95": ms(cold, 0.95),
            "current_ms_p50": ms(current, 0.5), "new_process_lineage_ms": round(lineage_s * 1000, 1)}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench stores", description=__doc__)
    parser.add_argument("--versions", type=int, default=200)
    parser.add_argument("--database-url", help="default: SQLite in a temporary folder")
    parser.add_argument("--object-store-url", help="default: a bucket on moto's S3 server, started here")
    parser.add_argument("--out", type=Path, default=Path("bench-results") / f"stores-{int(time.time())}")
    args = parser.parse_args(argv)
    settings = Settings()
    rows = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        folders = iter(range(10**6))
        rows.append(measure("folders", lambda: FolderVersionStore(tmp / "folders"), settings, args.versions))
        objects = args.object_store_url or new_bucket(stack.enter_context(s3_server(tmp / "moto.log")))
        database = args.database_url or f"sqlite:///{tmp / 'shared.db'}"

        def fresh() -> VersionStore:  # a process with a data folder of its own, its delta cache empty
            return open_versions(Settings(data_dir=tmp / f"process-{next(folders)}", database_url=database,
                                          object_store_url=objects))
        rows.append(measure(f"database ({database.split(':')[0]}) + S3", fresh, settings, args.versions))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2))
    for row in rows:
        print(json.dumps(row))
