"""What routes are given, read from app.state (create_app puts it there), as FastAPI dependencies: the routers
share one app's objects without closing over them.

They are async so FastAPI resolves them on the event loop: an async route (/ready) never waits for a thread
of the pool that generations hold."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.generations import GenerationService
from service.metrics import Metrics
from serving.runtime import Runtime


async def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


async def get_generations(request: Request) -> GenerationService:
    return request.app.state.generations


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
GenerationsDep = Annotated[GenerationService, Depends(get_generations)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
