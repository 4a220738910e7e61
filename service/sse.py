"""Server-Sent Events: one `data:` line of JSON per event. The iterator runs in the thread pool; when the
client goes away the response stops pulling from it, and the generation behind it stops at its next token."""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi.responses import StreamingResponse
from pydantic import BaseModel


def event_stream(events: Iterable[dict[str, Any] | BaseModel], done_marker: bool = False) -> StreamingResponse:
    """A model is sent with the fields it was given (exclude_unset): OpenAI's chunks leave out what a chunk
    does not carry (service/openai/protocol.py)."""
    def lines() -> Iterator[str]:
        try:
            for event in events:
                body = event.model_dump(mode="json", exclude_unset=True) if isinstance(event, BaseModel) else event
                yield f"data: {json.dumps(body, ensure_ascii=False)}\n\n"
            if done_marker:  # OpenAI's terminator
                yield "data: [DONE]\n\n"
        finally:  # a client that went away: close what feeds the events (it frees the generation's slot)
            if hasattr(events, "close"):
                events.close()
    return StreamingResponse(lines(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
