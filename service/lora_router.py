"""A thin router in front of an engine that serves one LoRA adapter per request (vLLM, LoRAX): each prompt is
routed as this server routes it, by the keys in the routes.json `ckl export` writes for a routed version, and the
OpenAI request goes on to the engine with the subject's adapter as its model (the base model's name when the prompt
reaches no subject).

It asks what the server asks: the API keys of CKL_API_KEYS (a key with the `generate` scope), a body of at most
CKL_LIMITS_MAX_BODY_BYTES, and a tenant's prompt reaches only its namespace's adapters and the shared ones, as its
prompts to this server reach only those documents. The engine gets `upstream_timeout_s` to answer.

A route that spans two subjects has no single adapter: it gets the adapter of its first document's subject (this
server would add both subjects' deltas).

An engine that asks for a key of its own (vLLM's `--api-key`, a `ckl serve` with keys) gets CKL_ROUTER_ENGINE_KEY
as its bearer token; the callers' keys are never passed on.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from core import routing
from core.keys import OPEN, Caller, find_caller
from core.namespaces import SHARED, within
from core.settings import Settings
from service.middleware import RequestGuard, allowed_hosts
from service.rate_limit import RateLimit

UPSTREAM_CONNECT_S = 10.0  # an engine that does not take the connection in this long is down


def read_routes(path: Path) -> dict[str, Any]:
    routes = json.loads(path.read_text())
    # A document without a namespace (an export from before namespaces) is shared.
    routes["namespaces"] = {entry[0]: (entry[2] if len(entry) > 2 else SHARED) for entry in routes["keys"]}
    routes["indexes"] = {}
    return routes


def index_for(routes: dict[str, Any], namespaces: frozenset[str] | None) -> routing.KeyIndex:
    """The keys a caller of `namespaces` (None: an admin, every one) may reach, indexed once per set."""
    if namespaces not in routes["indexes"]:
        routes["indexes"][namespaces] = routing.KeyIndex(
            [(entry[0], entry[1]) for entry in routes["keys"] if within(routes["namespaces"][entry[0]], namespaces)])
    return routes["indexes"][namespaces]


def adapter_for(prompt: str, routes: dict[str, Any], namespaces: frozenset[str] | None = None) -> str | None:
    """The adapter that answers `prompt` asked by a caller of `namespaces` (None: every one): the one holding
    exactly its route's documents, else its first document's; None for a prompt routed nowhere."""
    route = routing.route(prompt, index_for(routes, namespaces), routes["threshold"])
    if route is None:
        return None
    holding = {tuple(a["documents"]): a["name"] for a in routes["adapters"]}
    if route in holding:
        return holding[route]
    return next(a["name"] for a in routes["adapters"] if route[0] in a["documents"])


def prompt_of(body: dict[str, Any]) -> str:
    """The text a completion or chat request asks about (a chat's user turns, joined)."""
    if "messages" in body:
        return "\n".join(str(m.get("content") or "") for m in body["messages"]
                         if isinstance(m, dict) and m.get("role") == "user")
    prompt = body.get("prompt", "")
    return prompt if isinstance(prompt, str) else " ".join(map(str, prompt))


def error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def caller_of(request: Request, settings: Settings) -> Caller | JSONResponse:
    """Who asks, as the server would decide it: 401 for a missing or unknown key where keys are configured, 403 for
    a key that may not generate."""
    if not settings.api_keys:
        return OPEN
    caller = find_caller(settings.api_keys, request.headers.get("authorization"))
    if caller is None:
        return error(401, "unauthorized", "a configured API key is needed: Authorization: Bearer <key>")
    if not caller.may("generate"):
        return error(403, "forbidden", f"key {caller.name!r} may not generate")
    return caller


def create_router(routes: dict[str, Any], engine_url: str, base_model: str, settings: Settings | None = None,
                  upstream_timeout_s: float = 600.0) -> FastAPI:
    settings = settings or Settings()
    key = settings.router_engine_key
    client = httpx.AsyncClient(base_url=engine_url, timeout=httpx.Timeout(upstream_timeout_s,
                                                                          connect=UPSTREAM_CONNECT_S),
                               headers={"Authorization": f"Bearer {key.get_secret_value()}"} if key else None)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await client.aclose()

    app = FastAPI(title="ckl LoRA router", lifespan=lifespan)

    async def forward(path: str, request: Request) -> Response:
        caller = caller_of(request, settings)
        if isinstance(caller, JSONResponse):
            return caller
        try:
            body = await request.json()
        except ValueError:
            return error(400, "invalid_json", "the body is not JSON")
        if not isinstance(body, dict):
            return error(400, "invalid_json", "the body is not a JSON object")
        namespaces = None if caller.is_admin or not settings.api_keys else caller.namespaces()
        # Off the event loop: a long prompt's routing is CPU work that would hold every other request.
        adapter = await anyio.to_thread.run_sync(partial(adapter_for, prompt_of(body), routes, namespaces))
        body["model"] = adapter or base_model
        try:
            upstream = await client.send(client.build_request("POST", path, json=body), stream=True)
        except httpx.TimeoutException:
            return error(504, "engine_timeout", f"the engine did not answer within {upstream_timeout_s:g} s")
        except httpx.TransportError as exc:
            return error(502, "engine_unreachable", f"the engine could not be reached: {type(exc).__name__}")
        headers = {"x-ckl-adapter": body["model"]}
        if body.get("stream"):
            return StreamingResponse(upstream.aiter_raw(), status_code=upstream.status_code, headers=headers,
                                     media_type=upstream.headers.get("content-type"),
                                     background=BackgroundTask(upstream.aclose))
        content = await upstream.aread()
        await upstream.aclose()
        return Response(content, status_code=upstream.status_code, headers=headers,
                        media_type=upstream.headers.get("content-type"))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await forward("/v1/completions", request)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await forward("/v1/chat/completions", request)

    app.add_middleware(RateLimit, keys=settings.api_keys, per_s=settings.limits.requests_per_s,
                       burst=settings.limits.request_burst)
    app.add_middleware(RequestGuard, max_body_bytes=settings.limits.max_body_bytes,
                       allowed_hosts=allowed_hosts(settings))
    return app
