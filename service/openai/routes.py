"""The /v1 router: every route needs the generate scope (the caller is known to the generating ones: a request may
name the documents it can see). A streamed answer is Server-Sent Events of chunks,
then `data: [DONE]`; a whole one is the response model."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from service.auth import GenerateCaller, needs
from service.dependencies import GenerationsDep, RuntimeDep
from service.openai import answers
from service.openai.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ModelList,
)
from service.sse import event_stream

router = APIRouter(prefix="/v1")
STREAMED = {200: {"content": {"text/event-stream": {}}}}


def respond(answer: Any) -> Any:
    """A whole answer as it is; chunks as events ending with OpenAI's terminator."""
    if isinstance(answer, answers.Chunks):
        return event_stream(answer.events, answer.generation, done_marker=True)
    return answer


@router.post("/completions", response_model=CompletionResponse, responses=STREAMED)
def completions(req: CompletionRequest, generations: GenerationsDep, caller: GenerateCaller) -> Any:
    return respond(answers.completion(generations, req, caller))


@router.post("/chat/completions", response_model=ChatCompletionResponse, responses=STREAMED)
def chat_completions(req: ChatCompletionRequest, generations: GenerationsDep, caller: GenerateCaller) -> Any:
    return respond(answers.chat(generations, req, caller))


@router.get("/models", dependencies=[Depends(needs("generate"))])
def models(runtime: RuntimeDep) -> ModelList:
    return answers.models(runtime.versions)
