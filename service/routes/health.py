"""GET /health (the process answers) and GET /ready (the model is loaded): the two routes without a key."""
from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from service.dependencies import RuntimeDep
from service.errors import error_body

router = APIRouter()


# async: answered on the event loop, never queued behind generations in the thread pool.
@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready")
async def ready(runtime: RuntimeDep) -> JSONResponse:
    if runtime.serving is None:
        body = error_body("not_ready", runtime.error or "loading the model")
        return JSONResponse(body, status_code=503)
    body = {"ready": True, "model": runtime.settings.model, "knowledge_version": runtime.serving.current}
    return JSONResponse({**body, "fallback": runtime.fallback} if runtime.fallback else body)
