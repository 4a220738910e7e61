"""Server-Sent Events: one `data:` line of JSON per event. The events are read in the thread pool. A response
cancelled mid-stream (the client went away) never resumes or closes the iterator it was reading, so the response
itself closes the events and the generation behind them when it ends, however it ends."""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import suppress
from typing import Any, Protocol

from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send


class Closable(Protocol):
    def close(self) -> None: ...


class EventStream(StreamingResponse):
    """A streamed response that closes its generation when it ends: finished, failed or cancelled."""

    def __init__(self, lines: Iterator[str], generation: Closable) -> None:
        super().__init__(lines, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._lines, self._generation = lines, generation

    async def listen_for_disconnect(self, receive: Receive) -> None:
        """Starlette listens so on servers of ASGI spec below 2.4 (uvicorn: 2.3); on others the `finally` below
        closes the generation once the pool's thread returns."""
        await super().listen_for_disconnect(receive)
        # The client is gone: stop the generation now. The response's own end waits for the pool's thread, which may
        # be waiting for a prompt's first token that nobody will read.
        self._generation.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._generation.close()  # first: it is safe from this thread whatever the lines are doing
            with suppress(ValueError):  # still being read in the pool: nothing left to free there
                self._lines.close()


def event_stream(events: Iterable[dict[str, Any] | BaseModel], generation: Closable,
                 done_marker: bool = False) -> EventStream:
    """The events of `generation` (service/generations.py's Admitted), closed when the response ends. A model is
    sent with the fields it was given (exclude_unset): OpenAI's chunks leave out what a chunk does not carry
    (service/openai/protocol.py)."""
    def lines() -> Iterator[str]:
        for event in events:
            body = event.model_dump(mode="json", exclude_unset=True) if isinstance(event, BaseModel) else event
            yield f"data: {json.dumps(body, ensure_ascii=False)}\n\n"
        if done_marker:  # OpenAI's terminator
            yield "data: [DONE]\n\n"
    return EventStream(lines(), generation)
