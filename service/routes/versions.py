"""Knowledge versions (admin): the list, rollback by activating one, and the retention report
(/health/forgetting: what the current version still answers of the NF suite and of what it learned)."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from core.state import restored_by
from core.versions import UnknownVersion
from service.auth import needs
from service.charts import forgetting_png
from service.dependencies import RuntimeDep
from service.errors import ApiError
from service.schemas import ActivateRequest
from serving import forgetting

router = APIRouter(dependencies=[Depends(needs("admin"))])


@router.get("/versions")
def list_versions(runtime: RuntimeDep) -> dict[str, Any]:
    store = runtime.versions
    rows, unreadable = [], []
    for version in store.versions():
        try:
            rows.append(forgetting.version_row(store.manifest(version)))
        except UnknownVersion:  # a manifest a crash emptied: listed apart, never served
            unreadable.append(version)
    return {"current": store.current(), "versions": rows,
            "orphans": store.orphans(),  # written by a commit that crashed before it was served
            "unreadable": unreadable, "fallback": runtime.fallback, "start_error": runtime.error}


@router.post("/versions/{version}/activate")
def activate(version: int, req: ActivateRequest, runtime: RuntimeDep) -> dict[str, Any]:
    try:
        if (back := restored_by(runtime.versions, version)) and not req.force:
            raise ApiError(409, "would_restore_removed",
                           f"version {version} holds documents removed since: {', '.join(back)}; "
                           "send force: true to activate it anyway")
        runtime.versions.activate(version)
    except UnknownVersion as exc:
        raise ApiError(404, "not_found", str(exc)) from exc
    runtime.notify()
    return {"current": version}


@router.get("/health/forgetting")
def health_forgetting(runtime: RuntimeDep) -> dict[str, Any]:
    return forgetting.report(runtime.versions, runtime.suites, runtime.documents)


@router.get("/health/forgetting.png", response_class=Response, responses={200: {"content": {"image/png": {}}}})
def health_forgetting_png(runtime: RuntimeDep) -> Response:
    """The report's history as a picture: NF and learned accuracy per version."""
    rows = forgetting.report(runtime.versions, runtime.suites, runtime.documents)["history"]
    return Response(forgetting_png(rows), media_type="image/png")
