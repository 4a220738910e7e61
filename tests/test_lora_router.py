"""`ckl router` as deployed: a real process behind a real socket, in front of an engine. It asks for the keys the
server asks for, caps the body as it does, gives each tenant only its own and the shared adapters, gives the engine a
time limit, and will not listen beyond loopback open to all.

The engine here is a stand-in (a small HTTP app answering with the model it was asked for, slowly when told to):
the live vLLM/LoRAX test needs a GPU (tests/test_export.py)."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request

from bench.server import free_port
from core.keys import hash_key

ROOT = Path(__file__).resolve().parents[1]
ROUTES = {"version": 3, "threshold": 2.0,
          "keys": [["d1", {"veltoria": 5.0}, "acme"], ["d2", {"zembria": 5.0}, "globex"],
                   ["d3", {"brannoch": 5.0}, ""]],
          "adapters": [{"name": "subject-0", "documents": ["d1"]}, {"name": "subject-1", "documents": ["d2"]},
                       {"name": "subject-2", "documents": ["d3"]}]}
KEYS = [{"name": "acme", "sha256": hash_key("key-acme"), "scopes": ["generate"], "namespace": "acme"},
        {"name": "writer", "sha256": hash_key("key-writer"), "scopes": ["teach"]},
        {"name": "root", "sha256": hash_key("key-root"), "scopes": ["admin"]}]


def stand_in_engine() -> FastAPI:
    """Answers a completion with the model it was asked for and the key it was sent; waits 5 s first for a prompt
    that says "slow" (the router's timeout in the test is 2 s)."""
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request) -> dict:
        body = await request.json()
        if "slow" in body.get("prompt", ""):
            await asyncio.sleep(5)
        return {"model": body["model"], "key": request.headers.get("authorization"), "choices": [{"text": " ok"}]}

    return app


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    server = uvicorn.Server(uvicorn.Config(stand_in_engine(), host="127.0.0.1", port=free_port(), log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{server.config.port}"
    server.should_exit = server.force_exit = True  # the slow answer still pending is not waited for
    thread.join(10)


def router(tmp_path: Path, engine_url: str, env: dict[str, str], *args: str) -> subprocess.Popen:
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps(ROUTES))
    return subprocess.Popen([sys.executable, "-m", "ckl", "router", "--routes", str(routes), "--engine", engine_url,
                             "--base-model", "base", *args], env={**os.environ, **env}, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def ready(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise TimeoutError("the router never listened")


def test_the_router_refuses_to_listen_beyond_loopback_open_to_everyone(tmp_path, engine):
    process = router(tmp_path, engine, {"CKL_API_KEYS": "[]"}, "--host", "0.0.0.0", "--port", str(free_port()))
    assert process.wait(60) != 0 and "refusing to listen on 0.0.0.0" in process.stdout.read()


def test_the_router_asks_for_a_key_caps_the_body_keeps_tenants_apart_and_times_the_engine_out(tmp_path, engine):
    """And it sends the engine the engine's own key, never the caller's."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = router(tmp_path, engine, {"CKL_API_KEYS": json.dumps(KEYS), "CKL_LIMITS_MAX_BODY_BYTES": "2000",
                                        "CKL_ROUTER_ENGINE_KEY": "engine-secret"},
                     "--port", str(port), "--timeout", "2")
    try:
        ready(url, process)

        def ask(prompt: str, key: str | None = "key-acme") -> httpx.Response:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            return httpx.post(f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 1}, headers=headers,
                              timeout=30)

        assert ask("the capital of veltoria is", key=None).status_code == 401
        assert ask("the capital of veltoria is", key="key-wrong").status_code == 401
        assert ask("the capital of veltoria is", key="key-writer").status_code == 403
        # A tenant reaches its own subject and the shared one; another tenant's subject is as unknown as none.
        models = {prompt: ask(prompt).json()["model"] for prompt in
                  ("the capital of veltoria is", "the capital of brannoch is", "the capital of zembria is")}
        assert models == {"the capital of veltoria is": "subject-0", "the capital of brannoch is": "subject-2",
                          "the capital of zembria is": "base"}
        assert ask("the capital of zembria is", key="key-root").json()["model"] == "subject-1"  # an admin: all
        assert ask("the capital of veltoria is").json()["key"] == "Bearer engine-secret"  # the engine's own key
        too_large = ask("veltoria " * 400)
        assert too_large.status_code == 413 and too_large.json()["error"]["code"] == "too_large"
        started = time.monotonic()
        slow = ask("slow veltoria")
        assert slow.status_code == 504 and slow.json()["error"]["code"] == "engine_timeout"
        assert time.monotonic() - started < 20
    finally:
        process.kill()
        process.wait(30)
