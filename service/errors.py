"""The API's errors: one exception for every refusal, and the JSON envelope it is sent in. Routes under /v1
answer in OpenAI's shape instead, so OpenAI clients read them."""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.openai.protocol import ErrorInfo, ErrorResponse

OPENAI_TYPES = {401: "authentication_error", 403: "permission_error", 404: "invalid_request_error",
                429: "rate_limit_error", 503: "service_unavailable"}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, fields: list[dict[str, str]] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.fields = status, code, message, fields or []
        self.headers = headers


def field_error(field: str, rule: str, message: str) -> ApiError:
    return ApiError(422, "invalid_request", f"{field}: {message}", [{"field": field, "rule": rule, "message": message}])


def error_body(code: str, message: str, fields: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or []}}


def busy(message: str, retry_after_s: int) -> ApiError:
    return ApiError(429, "too_many_requests", f"{message}; try again later", headers={"Retry-After": str(retry_after_s)})


def respond(request: Request, status: int, code: str, message: str, fields: list[dict[str, str]] | None = None,
            headers: dict[str, str] | None = None) -> JSONResponse:
    if request.url.path.startswith("/v1/"):
        status = 400 if status == 422 else status  # OpenAI answers an invalid request with 400
        param = fields[0]["field"] if fields else None
        body = ErrorResponse(error=ErrorInfo(message=message, type=OPENAI_TYPES.get(status, "invalid_request_error"),
                                             param=param, code=code)).model_dump()
    else:
        body = error_body(code, message, fields)
    return JSONResponse(body, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return respond(request, exc.status, exc.code, exc.message, exc.fields, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = [
            {"field": "body" if e["type"] == "json_invalid" else ".".join(str(p) for p in e["loc"] if p != "body") or "body",
             "rule": e["type"], "message": e["msg"]}
            for e in exc.errors()
        ]
        message = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        return respond(request, 422, "invalid_request", message, fields)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return respond(request, exc.status_code, "http_error", str(exc.detail))


