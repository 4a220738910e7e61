"""The HTTP API: create_app puts a runtime and what the routes share in app.state, and adds the routes of one
router per area (service/routes/, service/openai/routes.py)."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import APIRouter, FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

import methods  # noqa: F401  (registers every method folder)
from service.errors import install_error_handlers
from service.generations import GenerationService
from service.metrics import Metrics
from service.middleware import RequestGuard, allowed_hosts, on_start
from service.openai.routes import router as openai_router
from service.rate_limit import RateLimit
from service.routes import console, docs, documents, generate, health, metrics, probes, versions
from serving.runtime import Runtime

THREADS_FOR_OTHER_ROUTES = 16
ROUTERS = (health.router, generate.router, documents.router, probes.router, versions.router, metrics.router,
           openai_router, docs.router, console.router)
access_log = logging.getLogger("ckl.access")


def create_app(runtime: Runtime) -> FastAPI:
    """The app over a runtime (Runtime.create); the runtime starts in the background when the app starts."""
    settings = runtime.settings
    # The schema and its page are routes of their own, behind a key (service/routes/docs.py).
    app = FastAPI(title="ckl-serve", version="0.1.0", lifespan=lifespan, openapi_url=None, docs_url=None,
                  redoc_url=None)
    app.state.runtime = runtime
    app.state.metrics = Metrics(runtime, enabled=settings.metrics)
    app.state.generations = GenerationService(runtime, app.state.metrics)
    install_error_handlers(app)
    app.add_middleware(RateLimit, keys=settings.api_keys, per_s=settings.limits.requests_per_s,
                       burst=settings.limits.request_burst)
    # Outside the rate limit: its 429s are counted and logged too.
    app.add_middleware(Measured, runtime=runtime, metrics=app.state.metrics)
    # Added last, so outermost: the guard sees every request first.
    app.add_middleware(RequestGuard, max_body_bytes=settings.limits.max_body_bytes,
                       allowed_hosts=allowed_hosts(settings))
    for router in ROUTERS:
        add_routes(app, router)
    return app


def add_routes(app: FastAPI, router: APIRouter) -> None:
    """The router's routes as the app's own (their paths and access rules were set on the router). Not
    include_router: the installed FastAPI (0.165) keeps an included router as one entry of app.routes, and
    tests/test_auth.py walks app.routes for every APIRoute and its one access rule."""
    app.router.routes.extend(router.routes)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    runtime: Runtime = app.state.runtime
    settings = runtime.settings
    # Sync handlers run in anyio's thread pool (40 threads by default), and a generation holds its thread
    # until it ends: with fewer threads than generations admitted, the rest would queue before admission
    # instead of getting their 429.
    limiter = anyio.to_thread.current_default_thread_limiter()
    limiter.total_tokens = max(limiter.total_tokens, settings.limits.max_concurrent_generations
                               + settings.limits.max_waiting_generations + THREADS_FOR_OTHER_ROUTES)
    threading.Thread(target=runtime.start, daemon=True, name="ckl-start").start()
    yield
    runtime.close()


class Measured:
    """Every request's metrics, and its access-log line when CKL_ACCESS_LOG is on, taken when its response starts
    (a stream's when its head is sent). Pure ASGI: a `BaseHTTPMiddleware` would pass every streamed chunk of every
    answer through a stream and a task of its own on the event loop, the loop the decoder's answers wait on."""

    def __init__(self, app: ASGIApp, runtime: Runtime, metrics: Metrics) -> None:
        self.app, self.runtime, self.metrics = app, runtime, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, measured = time.perf_counter(), []

        def measure(status: int) -> None:
            measured.append(status)
            route = getattr(scope.get("route"), "path", "unmatched")  # the template: bounded label values
            seconds, method = time.perf_counter() - started, scope["method"]
            self.metrics.request(route, method, status, seconds)
            if self.runtime.settings.access_log:
                access_log.info("%s %s %d %.1f ms", method, route, status, 1000 * seconds,
                                extra={"fields": {"method": method, "route": route, "status": status,
                                                  "ms": round(1000 * seconds, 1)}})

        try:
            await self.app(scope, receive, on_start(send, measure))
        except Exception:
            if not measured:  # the server's error handler answers 500
                measure(500)
            raise
