"""POST /generate: one completion of a prompt, whole or as Server-Sent Events."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Depends

from core.model.generation import Generation, SamplingParams
from service.auth import needs
from service.dependencies import GenerationsDep
from service.schemas import GenerateRequest, GenerateResponse
from service.sse import event_stream

router = APIRouter()


@router.post("/generate", response_model=GenerateResponse, dependencies=[Depends(needs("generate"))],
             responses={200: {"content": {"text/event-stream": {}}}})
def generate_text(req: GenerateRequest, generations: GenerationsDep) -> Any:
    ids = generations.prompt_ids(req.prompt, req.max_new_tokens)
    params = SamplingParams(req.max_new_tokens, req.temperature, req.top_p, tuple(req.stop), req.seed)
    pieces = generations.stream(ids, params)
    if not req.stream:
        *_, result = pieces
        return GenerateResponse(**vars(result))
    return event_stream(events(pieces), pieces)


def events(pieces: Iterator[str | Generation]) -> Iterator[dict[str, Any]]:
    """{"text"} per piece, then {"done": true} with what a whole answer says but the text."""
    for item in pieces:
        if isinstance(item, Generation):
            yield {"done": True, **{k: v for k, v in vars(item).items() if k != "text"}}
        else:
            yield {"text": item}
