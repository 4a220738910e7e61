"""What every request goes through before a route: a request id, a Host allowlist (no DNS rebinding onto an
open loopback server), a body-size cap read before parsing, and JSON only for state changes (a cross-site
form post or a body-less POST cannot change anything)."""
from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core import logs
from core.keys import LOOPBACK_HOSTS, is_loopback
from core.settings import Settings

REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def error(send: Send, status: int, code: str, message: str, request_id: str | None,
                extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """An error in the API's JSON envelope, answered before any route (`request_id`: None when the guard adds it)."""
    body = json.dumps({"error": {"code": code, "message": message, "fields": []}}).encode()
    tagged = ((b"x-request-id", request_id.encode()),) if request_id else ()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *tagged, *extra]})
    await send({"type": "http.response.body", "body": body})


def on_start(send: Send, started: Callable[[int], None]) -> Send:
    """`send`, telling `started` the response's status as its head goes out (a stream's before its first chunk)."""
    async def watched(message: Message) -> None:
        if message["type"] == "http.response.start":
            started(message["status"])
        await send(message)
    return watched


def host_name(host: str) -> str:
    """The Host header without its port ("[::1]:8000" -> "::1")."""
    if host.startswith("["):
        return host[1:].split("]")[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives `body` once, then what the client sends next (its disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}
    return replay


async def _read_capped(receive: Receive, cap: int) -> bytes | None:
    """The whole body, or None as soon as more than `cap` bytes have arrived (the rest is never read)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away: what came is all there is
            break
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > cap:
            return None
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


class RequestGuard:
    """Pure ASGI (it must see the body before FastAPI reads it): X-Request-ID in and out, 400 for a Host not
    allowed or both a Content-Length and a Transfer-Encoding, 413 past `max_body_bytes`
    (counted as the body arrives), 415 for a POST that is not application/json; errors in the API's JSON
    envelope."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, allowed_hosts: list[str]) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.allowed_hosts = None if "*" in allowed_hosts else set(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = header(scope, b"x-request-id")
        request_id = given if given and REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        logs.request_id.set(request_id)
        if self.allowed_hosts is not None and host_name(header(scope, b"host") or "") not in self.allowed_hosts:
            return await error(send, 400, "host_not_allowed", "this server does not answer to that Host header",
                                request_id)
        length, chunked = header(scope, b"content-length"), header(scope, b"transfer-encoding")
        if length is not None and chunked is not None:  # request smuggling: which length is meant is ambiguous
            return await error(send, 400, "ambiguous_length",
                                "a request may not carry both Content-Length and Transfer-Encoding", request_id)
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return await error(send, 413, "too_large", f"the body is over {self.max_body_bytes} bytes", request_id)
        if scope["method"] == "POST":
            content_type = (header(scope, b"content-type") or "").split(";")[0].strip().lower()
            if content_type != "application/json":
                return await error(send, 415, "unsupported_media_type",
                                    "a POST must send a JSON body (content-type: application/json)", request_id)
        if length is not None or chunked is not None:
            # The body is read here, counted as it arrives whatever the headers said, before anything parses it.
            body = await _read_capped(receive, self.max_body_bytes)
            if body is None:
                return await error(send, 413, "too_large", f"the body is over {self.max_body_bytes} bytes",
                                    request_id)
            receive = _replay(body, receive)

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        await self.app(scope, receive, tagged)


def allowed_hosts(settings: Settings) -> list[str]:
    """The Host headers served: as configured; else, open and on loopback, loopback names only (a web page
    cannot reach the server by DNS rebinding); else any."""
    if settings.allowed_hosts:
        return settings.allowed_hosts
    if not settings.api_keys and is_loopback(settings.host):
        return list(LOOPBACK_HOSTS)
    return ["*"]
