"""Fixtures: the tiny model, the real default model, and real servers (uvicorn, redis-server, ckl worker)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.server import find_redis_server, free_port, new_bucket, s3_server
from core.model.loader import LoadedModel
from tests.tiny import tiny_loaded, tiny_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parent.parent
# The converted default model is shared by every test run on this machine (gitignored).
MODEL_CACHE = Path(os.environ.get("CKL_TEST_MODEL_CACHE", ROOT / ".cache" / "models"))
# The LAMA-ckl data is not in the repository: CKL_TEST_LAMA_DIR, else the shared folder beside the clone.
LAMA_ENV = "CKL_TEST_LAMA_DIR"
LAMA_BESIDE = ROOT.parent / "shared" / "data" / "lama_ckl"
LAMA_FILES = ("variant_dev.jsonl", "invariant_descriptive.jsonl", "invariant_schematic.jsonl")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


@pytest.fixture
def tiny() -> LoadedModel:
    import torch

    tokenizer = tiny_tokenizer()
    return LoadedModel(tiny_model(len(tokenizer)), tokenizer, torch.device("cpu"), "tiny")


@pytest.fixture(scope="session")
def lama_dir() -> Path:
    """The LAMA-ckl data folder (CKL_TEST_LAMA_DIR, else ../shared/data/lama_ckl). CI always has it, so there a
    missing folder fails every test that needs it; elsewhere those tests skip, and the run's summary says why."""
    folder = Path(os.environ[LAMA_ENV]) if os.environ.get(LAMA_ENV) else LAMA_BESIDE
    missing = [name for name in LAMA_FILES if not (folder / name).is_file()]
    if not missing:
        return folder
    reason = f"no LAMA-ckl data: {', '.join(missing)} not in {folder} (set {LAMA_ENV} to the folder that holds them)"
    if in_ci():
        pytest.fail(f"{reason}; CI=true, where the data must be there (../shared/data/lama_ckl beside the clone)",
                    pytrace=False)
    pytest.skip(reason)


def pytest_terminal_summary(terminalreporter) -> None:
    """Say it when tests skipped for want of the LAMA-ckl data (a plain `pytest -q` lists no skip reasons). Read
    from the skip reports: under pytest-xdist the skips happen in the workers, the summary in this process."""
    reasons = [str(r.longrepr[-1]) for r in terminalreporter.stats.get("skipped", [])
               if isinstance(r.longrepr, tuple) and "no LAMA-ckl data" in str(r.longrepr[-1])]
    if reasons:
        terminalreporter.write_line(f"skipped the tests that read LAMA-ckl: {reasons[0]}", yellow=True)


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    from core.model.loader import default_model_path

    return default_model_path(MODEL_CACHE)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """The tiny model saved as a model folder, so `ckl serve` and `ckl worker` processes can load it (CKL_MODEL)."""
    folder = tmp_path_factory.mktemp("tiny-model")
    loaded = tiny_loaded()
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    return folder


def tiny_env(model_dir: Path, **extra: str) -> dict[str, str]:
    """Settings for processes on the tiny model, as tests/api_app.py's tiny_settings gives in-process."""
    return {"CKL_MODEL": str(model_dir), "CKL_TRAINING_WEIGHTING": "oracle", "CKL_ROUTED_LEARNING_RATE": "0.03",
            "CKL_TRAINING_MAX_STEPS": "60", "CKL_TRAINING_CHECK_EVERY": "1", "CKL_GATE_NF_TOLERANCE": "1.0",
            "CKL_GATE_LEARNED_TOLERANCE": "1.0",
            "CKL_VERSION_POLL_S": "0.5", "CKL_ROUTED_LAYERS": "all", "CKL_ROUTED_KNOWLEDGE_AS": "weights",
            "CKL_ROUTED_TARGETS": '["gate_proj", "up_proj", "down_proj"]', **extra}


class Proc:
    """A `ckl` subprocess with its log file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args, self.env, self.log = args, env, log
        self.popen: subprocess.Popen | None = None

    def start(self) -> Proc:
        handle = self.log.open("ab")
        self.popen = subprocess.Popen([sys.executable, "-m", "ckl", *self.args], env=self.env, cwd=ROOT,
                                      stdout=handle, stderr=subprocess.STDOUT)
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen and self.popen.poll() is None:
            self.popen.send_signal(sig)
            self.popen.wait(30)

    def tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log.exists() else ""


class Server(Proc):
    def __init__(self, data_dir: Path, env_extra: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "CKL_DATA_DIR": str(data_dir), "CKL_MODEL_CACHE_DIR": str(MODEL_CACHE),
               "CKL_PORT": str(self.port), **(env_extra or {})}
        super().__init__(["serve"], env, data_dir.parent / f"server-{self.port}.log")

    def wait_ready(self, timeout: float = 300) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.popen.poll() is None, f"server exited:\n{self.tail()}"
            try:
                r = httpx.get(f"{self.url}/ready", timeout=5)
                if r.status_code == 200:
                    return r.json()
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"server not ready in {timeout} s:\n{self.tail()}")


@pytest.fixture(scope="session")
def nf_suite_file(real_model_dir: Path, tmp_path_factory) -> Path:
    """The NF suite calibrated once on the real model, copied into each server's data folder with version 0's
    general-prompt continuations (made by the same command beside it)."""
    data = tmp_path_factory.mktemp("calibration")
    subprocess.run([sys.executable, "-m", "ckl", "probes", "calibrate", "--data-dir", str(data)],
                   env={**os.environ, "CKL_MODEL_CACHE_DIR": str(MODEL_CACHE)}, cwd=ROOT, check=True)
    return data / "probes" / "nf_suite.json"


def fresh_data_dir(tmp_path: Path, nf_suite_file: Path) -> Path:
    data = tmp_path / "data"
    (data / "probes").mkdir(parents=True)
    shutil.copy(nf_suite_file, data / "probes" / "nf_suite.json")
    shutil.copy(nf_suite_file.with_name("general.json"), data / "probes" / "general.json")
    return data


@pytest.fixture
def start_server(tmp_path: Path, nf_suite_file: Path) -> Iterator:
    servers: list[Proc] = []
    data = fresh_data_dir(tmp_path, nf_suite_file)

    def start(env_extra: dict[str, str] | None = None, data_dir: Path = data) -> Server:
        server = Server(data_dir, env_extra).start()
        servers.append(server)
        return server

    start.data_dir = data
    yield start
    for server in servers:
        server.kill(signal.SIGTERM)


def redis_server_binary() -> str:
    try:
        return find_redis_server()
    except RuntimeError as exc:
        pytest.fail(f"{exc}, or set CKL_TEST_REDIS_URL (a run on one worker)")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> Iterator[str]:
    """CKL_TEST_REDIS_URL where one test process runs the suite, else a redis-server started here for the session:
    each pytest-xdist worker has its own, since Redis's channels (the version announcements) are not per database
    and two tests may name one queue."""
    if (url := os.environ.get("CKL_TEST_REDIS_URL")) and not os.environ.get("PYTEST_XDIST_WORKER"):
        yield url
        return
    binary = redis_server_binary()
    port = free_port()
    folder = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen([binary, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(folder)],
                            stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """CKL_TEST_POSTGRES_URL: a live PostgreSQL (CI starts Debian's). Without one the PostgreSQL tests are skipped
    here, and fail in CI."""
    if url := os.environ.get("CKL_TEST_POSTGRES_URL"):
        return own_database(url)
    if in_ci():
        pytest.fail("CI runs the store's tests on PostgreSQL: set CKL_TEST_POSTGRES_URL")
    pytest.skip("no PostgreSQL (CKL_TEST_POSTGRES_URL)")


def own_database(url: str) -> str:
    """Under pytest-xdist, a database of this worker's own on that server (`<name>_<worker>`, made anew): the tests
    drop the project's tables, which would be the other worker's too."""
    if not (worker := os.environ.get("PYTEST_XDIST_WORKER")):
        return url
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    given = make_url(url)
    name = f"{given.database}_{worker}"
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return given.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> Iterator[str]:
    """moto's S3 server, spoken to over HTTP as any S3 store is (bench/server.py: s3_server)."""
    with s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as endpoint:
        yield endpoint


@pytest.fixture
def object_store_url(s3_endpoint) -> str:
    """A new bucket on the S3 server, as CKL_OBJECT_STORE_URL names it."""
    return new_bucket(s3_endpoint)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request) -> str | None:
    """A test that takes it runs on both databases of the document store: SQLite in the data folder (None), and
    a live PostgreSQL, its tables dropped first."""
    if request.param == "sqlite":
        return None
    return emptied(request.getfixturevalue("postgres_url"))


def emptied(url: str) -> str:
    """A live PostgreSQL's URL, every table of the project dropped first."""
    from sqlalchemy import create_engine

    from core.database import metadata

    engine = create_engine(url)
    metadata.drop_all(engine)
    engine.dispose()
    return url
