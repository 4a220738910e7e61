"""The /v1 router: every route needs the generate scope. A streamed answer is Server-Sent Events of chunks,
then `data: [DONE]`; a whole one is the response model."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from service.auth import needs
from service.dependencies import GenerationsDep, RuntimeDep
from service.openai import serving
from service.openai.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ModelList,
)
from service.sse import event_stream

router = APIRouter(prefix="/v1", dependencies=[Depends(needs("generate"))])
STREAMED = {200: {"content": {"text/event-stream": {}}}}


def respond(answer: Any) -> Any:
    """A whole answer as it is; chunks as events ending with OpenAI's terminator."""
    if isinstance(answer, serving.Chunks):
        return event_stream(answer.events, answer.generation, done_marker=True)
    return answer


@router.post("/completions", response_model=CompletionResponse, responses=STREAMED)
def completions(req: CompletionRequest, generations: GenerationsDep) -> Any:
    return respond(serving.completion(generations, req))


@router.post("/chat/completions", response_model=ChatCompletionResponse, responses=STREAMED)
def chat_completions(req: ChatCompletionRequest, generations: GenerationsDep) -> Any:
    return respond(serving.chat(generations, req))


@router.get("/models")
def models(runtime: RuntimeDep) -> ModelList:
    return serving.models(runtime.versions)
