"""A request rate per key, checked before any route runs (after the body guard: a body over the cap is refused
before it costs a token). One key sending requests as fast as answers come back, even ones refused at once (a
404, a 422), takes the event loop and the GIL from every other client. Each key's owner has a token bucket
(CKL_LIMITS_REQUESTS_PER_S, CKL_LIMITS_REQUEST_BURST); a request whose key names no configured key is counted
against its client's address. A request over its rate is answered 429 with Retry-After, and only after a pause
(at most `TARPIT_S`), so that a client ignoring Retry-After slows itself down instead of trading refusals for
answers. A request the route refuses for what it asks (a malformed or over-long request: 400, 413, 422; or one
sent while the service is busy: its 429) draws REFUSED_COST tokens in all, so a key that keeps sending what is
refused is slowed to a fraction of the rate: refusing costs the server too (reading, tokenizing, answering), and a
client's good requests are seldom refused. Not limited: a server without keys (it binds loopback only: one
user's), and /health and /ready (what load balancers ask)."""
from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from core.keys import KeyConfig, find_caller
from service.middleware import error, header, on_start

UNLIMITED_PATHS = ("/health", "/ready")
TARPIT_S = 1.0  # the longest a refused request is held before its 429
MAX_BUCKETS = 10_000  # callers remembered; the least recently seen are forgotten first (they start full again)
REFUSED = frozenset({400, 413, 422, 429})  # answers to what a request asks, not to who asks (401, 403, 404)
REFUSED_COST = 4  # tokens a refused request draws in all


@dataclass
class Bucket:
    tokens: float
    at: float  # time.monotonic() of the last update


def take(bucket: Bucket, now: float, rate: float, burst: float) -> float:
    """Take one request's token from `bucket` (refilled at `rate` a second up to `burst` since its last update):
    0.0 when it had one, else the seconds until it will (the bucket then keeps what it has)."""
    bucket.tokens = min(burst, bucket.tokens + (now - bucket.at) * rate)
    bucket.at = now
    if bucket.tokens >= 1:
        bucket.tokens -= 1
        return 0.0
    return (1 - bucket.tokens) / rate


def owe(bucket: Bucket, tokens: float, burst: float) -> None:
    """Draw `tokens` more from `bucket`, into debt down to one burst (a key's wait stays bounded)."""
    bucket.tokens = max(-burst, bucket.tokens - tokens)


def caller_id(keys: list[KeyConfig], scope: Scope) -> str:
    """Whose bucket a request draws on: its key's owner (a key and its replacement share one), else its address."""
    caller = find_caller(keys, header(scope, b"authorization"))
    if caller is not None and caller.name is not None:
        return f"key:{caller.owner}"
    return f"address:{(scope.get('client') or ('?', 0))[0]}"


class RateLimit:
    """Pure ASGI, inside the RequestGuard and the metrics."""

    def __init__(self, app: ASGIApp, keys: list[KeyConfig], per_s: float, burst: int) -> None:
        self.app, self.keys, self.per_s, self.burst = app, keys, per_s, burst
        self.buckets: OrderedDict[str, Bucket] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or self.per_s <= 0 or scope["path"] in UNLIMITED_PATHS:
            return await self.app(scope, receive, send)
        who, now = caller_id(self.keys, scope), time.monotonic()
        bucket = self.buckets.pop(who, None) or Bucket(float(self.burst), now)
        self.buckets[who] = bucket  # most recently seen last
        if len(self.buckets) > MAX_BUCKETS:
            self.buckets.popitem(last=False)
        wait_s = take(bucket, now, self.per_s, self.burst)
        if not wait_s:
            statuses: list[int] = []
            await self.app(scope, receive, on_start(send, statuses.append))
            if statuses and statuses[0] in REFUSED:
                owe(bucket, REFUSED_COST - 1, self.burst)
            return
        await asyncio.sleep(min(wait_s, TARPIT_S))
        await error(send, 429, "rate_limited", f"this key sends more than {self.per_s:g} requests a second; "
                    "try again later", None, ((b"retry-after", str(max(1, math.ceil(wait_s))).encode()),))
