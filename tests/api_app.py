"""The API on the tiny model, in-process: FastAPI's TestClient, the embedded queue, a learner on its own copy."""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient

from core.lifecycle import FINAL
from core.settings import Settings
from core.settings_groups import GROUPS, group_of
from service.app import create_app
from serving.runtime import Runtime
from tests.tiny import tiny_loaded
from workers.job import learn_document
from workers.learner import Learner
from workers.preview import AutoProbePreview

# The tiny model has two layers: a routed delta on the default's odd layers (one) is too weak for the tests' budgets.
# Its answers are read as weights unless a test asks otherwise: the tiny model reads no text (the default, both, is
# tests/test_knowledge.py's).
TINY_ROUTED = {"layers": "all", "targets": ["gate_proj", "up_proj", "down_proj"], "knowledge_as": "weights"}
TINY_METHODS = {"adapter": {"rank": 4, "alpha": 8, "learning_rate": 1e-2},
                "memory": {"sub_keys": 64, "heads": 2, "k": 4, "key_dim": 8}, "routed": TINY_ROUTED}


def tiny_settings(data_dir, methods: dict[str, dict] | None = None, **overrides) -> Settings:
    """Small adapter and memory, a fast learning rate, and a gate that only asks for the document's own probes.
    `methods`: each method's settings over TINY_METHODS', by method name; `overrides`: settings by name, a grouped
    one's by its name in its group (max_steps, nf_tolerance, max_body_bytes, learn_share)."""
    merged = {name: {**TINY_METHODS.get(name, {}), **(methods or {}).get(name, {})}
              for name in {*TINY_METHODS, *(methods or {})}}
    grouped = {"training": {"max_steps": 60, "check_every": 1, "weighting": "oracle"},
               "gate": {"nf_tolerance": 1.0, "learned_tolerance": 1.0}}
    for group in [name for name in overrides if name in GROUPS]:  # a group given whole, over the small defaults
        grouped.setdefault(group, {}).update(overrides.pop(group))
    for name in [name for name in overrides if name not in Settings.model_fields]:  # a grouped setting, by its name
        if (found := group_of(name)) and found[1] == name:  # else unknown or an old name: Settings refuses it
            grouped.setdefault(found[0], {})[found[1]] = overrides.pop(name)
    return Settings(data_dir=data_dir, method_settings=merged, **grouped, **overrides)


@contextmanager
def tiny_client(settings: Settings) -> Iterator[TestClient]:
    """A ready client; the server and the learner each hold their own tiny model, as two processes would. With a
    Redis URL, the jobs go to RQ for a `ckl worker` (none runs here)."""
    learner = Learner(settings, loaded=tiny_loaded())
    run_job = learn_document if settings.redis_url else learner.learn
    runtime = Runtime.create(settings, run_job=run_job, load=tiny_loaded, preview=AutoProbePreview(settings))
    with TestClient(create_app(runtime), base_url="http://127.0.0.1") as client:  # an open server serves loopback
        deadline = time.monotonic() + 60
        while client.get("/ready").status_code != 200:
            assert runtime.error is None, runtime.error
            assert time.monotonic() < deadline, "the tiny server never became ready"
            time.sleep(0.05)
        client.learner = learner
        yield client


def wait_final(client: TestClient, document_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = client.get(f"/documents/{document_id}").json()
        if record["status"] in FINAL:
            return record
        time.sleep(0.05)
    raise AssertionError(f"document {document_id} never finished")


def wait_version(client: TestClient, version: int, prompt: str, timeout: float = 30) -> dict:
    """The answer once the server serves `version` (the watcher swaps it in by itself)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.post("/generate", json={"prompt": prompt, "max_new_tokens": 1}).json()
        if body["knowledge_version"] == version:
            return body
        time.sleep(0.05)
    raise AssertionError(f"never served version {version}")
