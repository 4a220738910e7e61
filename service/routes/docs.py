"""GET /openapi.json and /docs behind a key: the schema names every route and field, so a server with keys
does not hand it to callers it does not know (an open server lets everyone through, as for every route)."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from service.auth import ANY_KEY, needs

router = APIRouter(dependencies=[Depends(needs(ANY_KEY))])


@router.get("/openapi.json", include_in_schema=False)
def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/docs", include_in_schema=False)
def docs(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{request.app.title} - API")
