"""The HTTP API: routes that read like the contract in the README."""
from __future__ import annotations

import logging
import threading
import time
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from service import forgetting, openai_api
from service.answers import Answers
from service.auth import LOOPBACK_HOSTS, Caller, find_caller, is_loopback
from service.documents import IdempotencyConflict, UnknownDocument
from service.errors import ApiError, busy, error_body, field_error, install_error_handlers
from service.knowledge import methods
from service.knowledge.probes import TooManyProbes, to_json
from service.knowledge.scoring import Probe
from service.knowledge.state import restored_by
from service.knowledge.versions import UnknownVersion
from service.metrics import Metrics
from service.middleware import RequestGuard
from service.model.generation import Generation, SamplingParams
from service.runtime import Runtime
from service.schemas import (DOCUMENT_ID, ActivateRequest, DocumentAccepted, DocumentRequest, GenerateRequest,
                             GenerateResponse, ProbesRequest)
from service.sse import event_stream

THREADS_FOR_OTHER_ROUTES = 16


def create_app(runtime: Runtime) -> FastAPI:
    """The app over a runtime (Runtime.create); the runtime starts in the background when the app starts."""
    settings = runtime.settings

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        # Sync handlers run in anyio's thread pool (40 threads by default), and a generation holds its thread
        # until it ends: with fewer threads than generations admitted, the rest would queue before admission
        # instead of getting their 429.
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = max(limiter.total_tokens, settings.max_concurrent_generations
                                   + settings.max_waiting_generations + THREADS_FOR_OTHER_ROUTES)
        threading.Thread(target=runtime.start, daemon=True, name="ckl-start").start()
        yield
        runtime.close()

    app = FastAPI(title="ckl-serve", version="0.1.0", lifespan=lifespan)
    app.state.runtime = runtime
    install_error_handlers(app)
    metrics = Metrics(runtime, enabled=settings.metrics)
    access = logging.getLogger("ckl.access")

    @app.middleware("http")
    async def measure(request: Request, call_next):
        started = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")  # the template: bounded label values
        seconds = time.perf_counter() - started
        metrics.request(route, request.method, response.status_code, seconds)
        if settings.access_log:
            access.info("%s %s %d %.1f ms", request.method, route, response.status_code, 1000 * seconds,
                        extra={"fields": {"method": request.method, "route": route, "status": response.status_code,
                                          "ms": round(1000 * seconds, 1)}})
        return response

    # Added last, so outermost: the guard sees every request first.
    app.add_middleware(RequestGuard, max_body_bytes=settings.max_body_bytes, allowed_hosts=allowed_hosts(settings))

    def needs(scope: str):
        """A route's access rule: a configured key with `scope` (admin may do everything)."""
        def check(request: Request) -> Caller:
            caller = find_caller(settings.api_keys, request.headers.get("authorization"))
            if caller is None:
                raise ApiError(401, "unauthorized", "an API key is needed: Authorization: Bearer <key>",
                               headers={"WWW-Authenticate": "Bearer"})
            if not caller.may(scope):
                raise ApiError(403, "forbidden", f"this key lacks the {scope} scope")
            return caller
        check.scope = scope  # read by the test that walks every route
        return check

    answers = Answers(runtime, metrics)
    serving = answers.serving

    def owned(document_id: str, caller: Caller) -> dict[str, Any]:
        """A document the caller may see: another key's document is as unknown as one that does not exist."""
        try:
            record = runtime.documents.get(document_id) if DOCUMENT_ID.fullmatch(document_id) else None
        except UnknownDocument:
            record = None
        if record is None or not caller.owns(record):
            raise ApiError(404, "not_found", f"no document {document_id}")
        return record

    # async: answered on the event loop, never queued behind generations in the thread pool.
    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        if runtime.serving is None:
            body = error_body("not_ready", runtime.error or "loading the model")
            return JSONResponse(body, status_code=503)
        body = {"ready": True, "model": settings.model, "knowledge_version": runtime.serving.current}
        return JSONResponse({**body, "fallback": runtime.fallback} if runtime.fallback else body)

    @app.post("/generate", response_model=GenerateResponse, dependencies=[Depends(needs("generate"))],
              responses={200: {"content": {"text/event-stream": {}}}})
    def generate_text(req: GenerateRequest) -> Any:
        ids = answers.prompt_ids(req.prompt, req.max_new_tokens)
        params = SamplingParams(req.max_new_tokens, req.temperature, req.top_p, tuple(req.stop), req.seed)
        pieces = answers.stream(ids, params)
        if not req.stream:
            *_, result = pieces
            return GenerateResponse(**vars(result))

        def events():
            for item in pieces:
                if isinstance(item, Generation):  # the last event: what a whole answer says, but the text
                    yield {"done": True, **{k: v for k, v in vars(item).items() if k != "text"}}
                else:
                    yield {"text": item}
        return event_stream(events())

    @app.post("/documents", status_code=202, response_model=DocumentAccepted)
    def post_document(req: DocumentRequest, caller: Caller = Depends(needs("teach"))) -> DocumentAccepted:
        if len(req.text) > settings.max_document_chars:
            raise field_error("text", "max_chars", f"longer than {settings.max_document_chars} characters")
        if len(req.probes) > settings.max_probes_per_document:
            raise field_error("probes", "max_items", f"at most {settings.max_probes_per_document} probes")
        weighting = req.weighting or settings.weighting
        if weighting == "oracle" and not any(p.answer.strip() in req.text for p in req.probes):
            raise field_error("weighting", "needs_answers_in_text",
                              "oracle weighting needs probes whose answer occurs in the text")
        serving()  # refuse before storing anything while no queue exists yet
        pending = runtime.documents.pending()
        if len(pending) >= settings.max_queued_documents:
            raise busy(f"{len(pending)} documents are waiting to be learned", retry_after_s=30)
        if caller.name and sum(r.get("owner") == caller.name for r in pending) >= settings.max_queued_per_key:
            raise busy(f"this key has {settings.max_queued_per_key} documents waiting", retry_after_s=30)
        body = {**req.model_dump(exclude={"idempotency_key"}), "weighting": weighting,
                "method": req.method or settings.method, "owner": caller.name}
        try:
            # Idempotency keys are each API key's own: one caller can neither reuse nor probe another's.
            key = f"user:{caller.name or ''}:{req.idempotency_key}" if req.idempotency_key else None
            record, new = runtime.documents.create(body, key)
        except IdempotencyConflict as exc:
            raise ApiError(409, "idempotency_conflict", str(exc)) from exc
        if new:
            try:
                job_id = runtime.queue.enqueue(record["document_id"], 0)
            except Exception as exc:  # e.g. Redis is down: not accepted, and the record says so
                runtime.documents.update(record["document_id"], status="failed", error=f"not queued: {exc}")
                raise ApiError(503, "queue_unavailable", f"the job queue is unavailable: {exc}") from exc
            record = runtime.documents.update(record["document_id"], job_id=job_id)
        return DocumentAccepted(document_id=record["document_id"], job_id=record["job_id"], status=record["status"],
                                status_url=f"/documents/{record['document_id']}")

    @app.delete("/documents/{document_id}", status_code=202, response_model=DocumentAccepted)
    def delete_document(document_id: str,
                        caller: Caller = Depends(needs("teach"))) -> DocumentAccepted:
        """Take one document's contribution out (a removable method): a removal job makes a new, gated version."""
        target = owned(document_id, caller)
        if target.get("removes"):
            raise ApiError(409, "not_removable", "this is a removal; activate an earlier version to undo it")
        if target.get("removed_in_version"):
            raise ApiError(409, "already_removed", f"removed in version {target['removed_in_version']}")
        if target["status"] != "committed":
            raise ApiError(409, "not_committed", f"only a committed document can be removed (status: {target['status']})")
        if target["method"] not in methods.servable() or not methods.get(target["method"]).removable:
            removable = ", ".join(s.name for s in methods.registered() if s.removable)
            raise ApiError(409, "not_removable", f"only documents of a removable method ({removable}) can be removed "
                                                 f"one by one; roll back with POST /versions/{{n}}/activate")
        lineage = {m["version"] for m in runtime.versions.lineage(runtime.versions.current())}
        if target["version"] not in lineage:
            raise ApiError(409, "not_current", f"version {target['version']} is not part of the current version")
        serving()
        body = {"text": "", "probes": [], "method": target["method"], "weighting": "uniform", "removes": document_id,
                "owner": caller.name}
        try:
            record, new = runtime.documents.create(
                body, f"remove:{caller.name or ''}:{document_id}:{runtime.versions.current()}")
        except IdempotencyConflict as exc:
            raise ApiError(409, "already_removing", "a removal of this document is already queued") from exc
        if new:
            record = runtime.documents.update(record["document_id"], job_id=runtime.queue.enqueue(record["document_id"], 0))
        return DocumentAccepted(document_id=record["document_id"], job_id=record["job_id"], status=record["status"],
                                status_url=f"/documents/{record['document_id']}")

    @app.get("/documents/{document_id}")
    def get_document(document_id: str, caller: Caller = Depends(needs("teach"))) -> dict[str, Any]:
        return owned(document_id, caller)

    @app.get("/documents")
    def list_documents(offset: int = Query(0, ge=0), limit: int = Query(50, ge=1, le=500),
                       caller: Caller = Depends(needs("teach"))) -> dict[str, Any]:
        records = [r for r in runtime.documents.all() if caller.owns(r)]
        brief = [{k: r[k] for k in ("document_id", "status", "version", "created_at", "method")} for r in records]
        return {"total": len(records), "offset": offset, "limit": limit, "items": brief[offset : offset + limit]}

    @app.post("/probes", status_code=201, dependencies=[Depends(needs("admin"))])
    def add_probes(req: ProbesRequest) -> dict[str, Any]:
        try:
            merged = runtime.suites.add_must_keep([Probe(p.prompt, p.answer) for p in req.probes],
                                                  settings.max_must_keep_probes)
        except TooManyProbes as exc:
            raise field_error("probes", "max_items", str(exc)) from exc
        return {"must_keep": to_json(merged)}

    @app.delete("/probes", dependencies=[Depends(needs("admin"))])
    def remove_probes(req: ProbesRequest) -> dict[str, Any]:
        return {"must_keep": to_json(runtime.suites.remove_must_keep([Probe(p.prompt, p.answer) for p in req.probes]))}

    @app.get("/probes", dependencies=[Depends(needs("admin"))])
    def list_probes() -> dict[str, Any]:
        suite = runtime.suites.nf_suite() or {"probes": []}
        return {"not_to_forget": suite["probes"], "must_keep": to_json(runtime.suites.must_keep())}

    @app.get("/versions", dependencies=[Depends(needs("admin"))])
    def list_versions() -> dict[str, Any]:
        store = runtime.versions
        return {"current": store.current(), "versions": [forgetting.version_row(store.manifest(v)) for v in store.versions()],
                "orphans": store.orphans()}  # written by a commit that crashed before it was served

    @app.post("/versions/{version}/activate", dependencies=[Depends(needs("admin"))])
    def activate(version: int, req: ActivateRequest) -> dict[str, Any]:
        try:
            if back := restored_by(runtime.versions, version):
                if not req.force:
                    raise ApiError(409, "would_restore_removed",
                                   f"version {version} holds documents removed since: {', '.join(back)}; "
                                   "send force: true to activate it anyway")
            runtime.versions.activate(version)
        except UnknownVersion as exc:
            raise ApiError(404, "not_found", str(exc)) from exc
        runtime.notify()
        return {"current": version}

    @app.get("/metrics", dependencies=[Depends(needs("metrics"))])
    def prometheus_metrics() -> Response:
        if not metrics.enabled:
            raise ApiError(404, "not_found", "metrics are off (CKL_METRICS=false)")
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/health/forgetting", dependencies=[Depends(needs("admin"))])
    def health_forgetting() -> dict[str, Any]:
        return forgetting.report(runtime.versions, runtime.suites, runtime.documents)

    openai_api.install(app, runtime, answers, needs)
    return app


def allowed_hosts(settings) -> list[str]:
    """The Host headers served: as configured; else, open and on loopback, loopback names only (a web page
    cannot reach the server by DNS rebinding); else any."""
    if settings.allowed_hosts:
        return settings.allowed_hosts
    if not settings.api_keys and is_loopback(settings.host):
        return list(LOOPBACK_HOSTS)
    return ["*"]

