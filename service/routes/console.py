"""/console: the operator's page (service/console/), static HTML, CSS and JavaScript, no build step and nothing
from elsewhere. The files hold no data and need no key: every datum the page shows comes from the API with the key
typed into it, under that key's scopes (an admin sees everything, a teach key its own documents)."""
from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

router = APIRouter()
FOLDER = Path(__file__).resolve().parent.parent / "console"
# Fetched from the page only: the browser sends nothing else, and a page may not frame it.
HEADERS = {"Cache-Control": "no-cache", "X-Frame-Options": "DENY",
           "Content-Security-Policy": "default-src 'self'; img-src 'self' blob:; frame-ancestors 'none'"}


@router.get("/console", include_in_schema=False)
def console_page() -> FileResponse:
    return FileResponse(FOLDER / "index.html", media_type="text/html", headers=HEADERS)


@router.get("/console/console.js", include_in_schema=False)
def console_script() -> FileResponse:
    return FileResponse(FOLDER / "console.js", media_type="text/javascript", headers=HEADERS)


@router.get("/console/console.css", include_in_schema=False)
def console_style() -> FileResponse:
    return FileResponse(FOLDER / "console.css", media_type="text/css", headers=HEADERS)
