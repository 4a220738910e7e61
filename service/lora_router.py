"""A thin router in front of an engine that serves one LoRA adapter per request (vLLM, LoRAX): each prompt is
routed as this server routes it, by the keys in the routes.json `ckl export` writes for a routed version, and the
OpenAI request goes on to the engine with the subject's adapter as its model (the base model's name when the prompt
reaches no subject).

A route that spans two subjects has no single adapter: it gets the adapter of its first document's subject (this
server would add both subjects' deltas).
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from core import routing


def read_routes(path: Path) -> dict[str, Any]:
    routes = json.loads(path.read_text())
    routes["index"] = routing.KeyIndex([(d, k) for d, k in routes["keys"]])
    return routes


def adapter_for(prompt: str, routes: dict[str, Any]) -> str | None:
    """The adapter that answers `prompt`: the one holding exactly its route's documents, else its first
    document's; None for a prompt routed nowhere."""
    route = routing.route(prompt, routes["index"], routes["threshold"])
    if route is None:
        return None
    holding = {tuple(a["documents"]): a["name"] for a in routes["adapters"]}
    if route in holding:
        return holding[route]
    return next(a["name"] for a in routes["adapters"] if route[0] in a["documents"])


def prompt_of(body: dict[str, Any]) -> str:
    """The text a completion or chat request asks about (a chat's user turns, joined)."""
    if "messages" in body:
        return "\n".join(m.get("content") or "" for m in body["messages"] if m.get("role") == "user")
    prompt = body.get("prompt", "")
    return prompt if isinstance(prompt, str) else " ".join(map(str, prompt))


def create_router(routes: dict[str, Any], engine_url: str, base_model: str) -> FastAPI:
    client = httpx.AsyncClient(base_url=engine_url, timeout=None)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await client.aclose()

    app = FastAPI(title="ckl LoRA router", lifespan=lifespan)

    async def forward(path: str, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": {"message": "the body is not JSON"}}, status_code=400)
        body["model"] = adapter_for(prompt_of(body), routes) or base_model
        upstream = await client.send(client.build_request("POST", path, json=body), stream=True)
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

    return app
