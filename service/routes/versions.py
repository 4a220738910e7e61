"""Knowledge versions (admin): the list, rollback by activating one, and the retention report
(/health/forgetting: what the current version still answers of the NF suite and of what it learned)."""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from core.state import restored_by
from core.versions import MAX_VERSION, UnknownVersion
from service.auth import needs
from service.charts import forgetting_png
from service.dependencies import RuntimeDep
from service.errors import ApiError
from service.schemas import ActivateRequest
from serving import forgetting

router = APIRouter(dependencies=[Depends(needs("admin"))])


Limit = Annotated[int, Query(ge=1, le=1000, description="versions in the page")]
Before = Annotated[int | None, Query(ge=0, le=MAX_VERSION, description="the page below this version (None: the newest)")]


@router.get("/versions")
def list_versions(runtime: RuntimeDep, limit: Limit = 100, before: Before = None) -> dict[str, Any]:
    """One page of versions, newest last; `before` names the next older page (None: this is the oldest)."""
    store = runtime.versions
    rows, unreadable = [], []
    page, older = forgetting.newest(store.versions(), before, limit)
    for version in page:
        try:
            rows.append(forgetting.version_row(store.manifest(version)))
        except UnknownVersion:  # a manifest a crash emptied: listed apart, never served
            unreadable.append(version)
    return {"current": store.current(), "versions": rows, "before": older,
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
def health_forgetting(runtime: RuntimeDep, limit: Limit = 100, before: Before = None) -> dict[str, Any]:
    """The retention report; its history one page of versions (`history_before` names the older page)."""
    return forgetting.report(runtime.versions, runtime.suites, runtime.documents, limit, before)


@router.get("/health/forgetting.png", response_class=Response, responses={200: {"content": {"image/png": {}}}})
def health_forgetting_png(runtime: RuntimeDep, limit: Limit = 100, before: Before = None) -> Response:
    """A page of the report's history as a picture: NF and learned accuracy per version."""
    rows = forgetting.report(runtime.versions, runtime.suites, runtime.documents, limit, before)["history"]
    return Response(forgetting_png(rows), media_type="image/png")
