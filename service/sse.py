"""Server-Sent Events: one `data:` line of JSON per event. The iterator runs in the thread pool; when the
client goes away the response stops pulling from it, and the generation behind it stops at its next token."""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi.responses import StreamingResponse


def event_stream(events: Iterable[dict[str, Any]], done_marker: bool = False) -> StreamingResponse:
    def lines() -> Iterator[str]:
        try:
            for event in events:
                yield f"data: {json.dumps(event, ensure_ascii=False)}\n\n"
            if done_marker:  # OpenAI's terminator
                yield "data: [DONE]\n\n"
        finally:  # a client that went away: close what feeds the events (it frees the generation's slot)
            if hasattr(events, "close"):
                events.close()
    return StreamingResponse(lines(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
