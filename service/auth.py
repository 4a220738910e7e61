"""The HTTP side of API keys: each route's access rule, a dependency that answers 401 or 403. Which key
holds which scopes is core/keys.py's."""
from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from core.keys import Caller, find_caller
from service.errors import ApiError

ANY_KEY = ""  # the access rule of routes any configured key may read (the API's schema)


def needs(scope: str) -> Callable[[Request], Caller]:
    """A route's access rule: a configured key with `scope` (admin may do everything; ANY_KEY: any key). Every
    route but /health and /ready has exactly one, as a dependency of its own or of its router."""
    def check(request: Request) -> Caller:
        caller = find_caller(request.app.state.runtime.settings.api_keys, request.headers.get("authorization"))
        if caller is None:
            raise ApiError(401, "unauthorized", "an API key is needed: Authorization: Bearer <key>",
                           headers={"WWW-Authenticate": "Bearer"})
        if scope != ANY_KEY and not caller.may(scope):
            raise ApiError(403, "forbidden", f"this key lacks the {scope} scope")
        return caller
    check.scope = scope  # type: ignore[attr-defined]  # read by the test that walks every route
    return check


GenerateCaller = Annotated[Caller, Depends(needs("generate"))]  # the generating routes' rule, and who asks
