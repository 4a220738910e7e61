"""The HTTP API: routes that read like the contract in the README."""
from __future__ import annotations

import threading
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from service import forgetting
from service.knowledge import methods
from service.documents import IdempotencyConflict, UnknownDocument
from service.knowledge.probes import to_json
from service.knowledge.scoring import Probe
from service.knowledge.versions import UnknownVersion
from service.model.generation import SamplingParams, generate
from service.runtime import Runtime
from service.schemas import DocumentAccepted, DocumentRequest, GenerateRequest, GenerateResponse, ProbesRequest


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, fields: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.fields = status, code, message, fields or []


def field_error(field: str, rule: str, message: str) -> ApiError:
    return ApiError(422, "invalid_request", f"{field}: {message}", [{"field": field, "rule": rule, "message": message}])


def error_body(code: str, message: str, fields: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or []}}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.fields), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        fields = [
            {"field": "body" if e["type"] == "json_invalid" else ".".join(str(p) for p in e["loc"] if p != "body") or "body",
             "rule": e["type"], "message": e["msg"]}
            for e in exc.errors()
        ]
        message = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        return JSONResponse(error_body("invalid_request", message, fields), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body("http_error", str(exc.detail)), status_code=exc.status_code)


def create_app(runtime: Runtime) -> FastAPI:
    """The app over a runtime (Runtime.create); the runtime starts in the background when the app starts."""
    settings = runtime.settings

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        threading.Thread(target=runtime.start, daemon=True, name="ckl-start").start()
        yield
        runtime.close()

    app = FastAPI(title="ckl-serve", version="0.1.0", lifespan=lifespan)
    app.state.runtime = runtime
    install_error_handlers(app)

    def serving():
        if runtime.serving is None:
            raise ApiError(503, "not_ready", runtime.error or "the model is still loading; GET /ready says when")
        return runtime.serving

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    def ready() -> JSONResponse:
        if runtime.serving is None:
            body = error_body("not_ready", runtime.error or "loading the model")
            return JSONResponse(body, status_code=503)
        return JSONResponse({"ready": True, "model": settings.model, "knowledge_version": runtime.serving.current})

    @app.post("/generate", response_model=GenerateResponse)
    def generate_text(req: GenerateRequest) -> GenerateResponse:
        if len(req.prompt) > settings.max_prompt_chars:
            raise field_error("prompt", "max_chars", f"longer than {settings.max_prompt_chars} characters")
        if req.max_new_tokens > settings.max_new_tokens_cap:
            raise field_error("max_new_tokens", "less_than_equal", f"must be <= {settings.max_new_tokens_cap}")
        model = serving()
        ids = model.tokenizer(req.prompt)["input_ids"]
        if len(ids) > settings.max_prompt_tokens:
            raise field_error("prompt", "max_tokens", f"{len(ids)} tokens, more than {settings.max_prompt_tokens}")
        params = SamplingParams(req.max_new_tokens, req.temperature, req.top_p, tuple(req.stop), req.seed)
        return GenerateResponse(**vars(generate(model, ids, params)))

    @app.post("/documents", status_code=202, response_model=DocumentAccepted)
    def post_document(req: DocumentRequest) -> DocumentAccepted:
        if len(req.text) > settings.max_document_chars:
            raise field_error("text", "max_chars", f"longer than {settings.max_document_chars} characters")
        if len(req.probes) > settings.max_probes_per_document:
            raise field_error("probes", "max_items", f"at most {settings.max_probes_per_document} probes")
        weighting = req.weighting or settings.weighting
        if weighting == "oracle" and not any(p.answer.strip() in req.text for p in req.probes):
            raise field_error("weighting", "needs_answers_in_text",
                              "oracle weighting needs probes whose answer occurs in the text")
        serving()  # refuse before storing anything while no queue exists yet
        body = {**req.model_dump(exclude={"idempotency_key"}), "weighting": weighting,
                "method": req.method or settings.method}
        try:
            record, new = runtime.documents.create(body, req.idempotency_key)
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
    def delete_document(document_id: str) -> DocumentAccepted:
        """Take one memory document's contribution out: a removal job makes a new, gated version."""
        try:
            target = runtime.documents.get(document_id)
        except UnknownDocument as exc:
            raise ApiError(404, "not_found", f"no document {document_id}") from exc
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
        body = {"text": "", "probes": [], "method": target["method"], "weighting": "uniform", "removes": document_id}
        record, new = runtime.documents.create(body, f"remove:{document_id}:{runtime.versions.current()}")
        if new:
            record = runtime.documents.update(record["document_id"], job_id=runtime.queue.enqueue(record["document_id"], 0))
        return DocumentAccepted(document_id=record["document_id"], job_id=record["job_id"], status=record["status"],
                                status_url=f"/documents/{record['document_id']}")

    @app.get("/documents/{document_id}")
    def get_document(document_id: str) -> dict[str, Any]:
        try:
            return runtime.documents.get(document_id)
        except UnknownDocument as exc:
            raise ApiError(404, "not_found", f"no document {document_id}") from exc

    @app.get("/documents")
    def list_documents(offset: int = Query(0, ge=0), limit: int = Query(50, ge=1, le=500)) -> dict[str, Any]:
        records = runtime.documents.all()
        brief = [{k: r[k] for k in ("document_id", "status", "version", "created_at", "method")} for r in records]
        return {"total": len(records), "offset": offset, "limit": limit, "items": brief[offset : offset + limit]}

    @app.post("/probes", status_code=201)
    def add_probes(req: ProbesRequest) -> dict[str, Any]:
        merged = runtime.suites.add_must_keep([Probe(p.prompt, p.answer) for p in req.probes])
        return {"must_keep": to_json(merged)}

    @app.get("/probes")
    def list_probes() -> dict[str, Any]:
        suite = runtime.suites.nf_suite() or {"probes": []}
        return {"not_to_forget": suite["probes"], "must_keep": to_json(runtime.suites.must_keep())}

    @app.get("/versions")
    def list_versions() -> dict[str, Any]:
        store = runtime.versions
        return {"current": store.current(), "versions": [forgetting.version_row(store.manifest(v)) for v in store.versions()]}

    @app.post("/versions/{version}/activate")
    def activate(version: int) -> dict[str, Any]:
        try:
            runtime.versions.activate(version)
        except UnknownVersion as exc:
            raise ApiError(404, "not_found", str(exc)) from exc
        runtime.notify()
        return {"current": version}

    @app.get("/health/forgetting")
    def health_forgetting() -> dict[str, Any]:
        return forgetting.report(runtime.versions, runtime.suites, runtime.documents)

    return app
