"""POST /generate: one completion of a prompt, whole or as Server-Sent Events."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter

from service.auth import GenerateCaller
from service.dependencies import GenerationsDep
from service.generations import citation
from service.schemas import GenerateRequest, GenerateResponse, KnowledgeChoice
from service.sse import event_stream
from serving.generation import Generation, SamplingParams

router = APIRouter()


@router.post("/generate", response_model=GenerateResponse, responses={200: {"content": {"text/event-stream": {}}}})
def generate_text(req: GenerateRequest, generations: GenerationsDep, caller: GenerateCaller) -> Any:
    ids = generations.prompt_ids(req.prompt, req.max_new_tokens)
    params = SamplingParams(req.max_new_tokens, req.temperature, req.top_p, tuple(req.stop), req.seed)
    pieces = generations.stream(ids, params, knowledge=req.knowledge, caller=caller, knowledge_as=req.knowledge_as)
    if not req.stream:
        *_, result = pieces
        return GenerateResponse(**whole(result, req.knowledge))
    return event_stream(events(pieces, req.knowledge), pieces)


def whole(result: Generation, knowledge: KnowledgeChoice) -> dict[str, Any]:
    """What a whole answer says: the Generation's fields, its `used` as the knowledge that answered."""
    fields = {k: v for k, v in vars(result).items() if k != "used"}
    return {**fields, "knowledge": citation(result, knowledge)}


def events(pieces: Iterator[str | Generation], knowledge: KnowledgeChoice) -> Iterator[dict[str, Any]]:
    """{"text"} per piece, then {"done": true} with what a whole answer says but the text."""
    for item in pieces:
        if isinstance(item, Generation):
            yield {"done": True, **{k: v for k, v in whole(item, knowledge).items() if k != "text"}}
        else:
            yield {"text": item}
