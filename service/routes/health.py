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
    """Ready or not, and the version served; nothing about the machine (paths, exception text): an admin reads
    those on GET /versions and in the log."""
    if runtime.serving is None:
        message = "start-up failed: an admin sees why on GET /versions" if runtime.error else "loading the model"
        return JSONResponse(error_body("not_ready", message), status_code=503)
    body = {"ready": True, "knowledge_version": runtime.serving.current}
    if runtime.fallback:  # which version was not served, and which is instead; the reason is on GET /versions
        body["fallback"] = {k: v for k, v in runtime.fallback.items() if k != "reason"}
    return JSONResponse(body)
