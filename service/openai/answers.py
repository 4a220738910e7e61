"""From an OpenAI request to a generation, and from the generation to OpenAI's response: the whole answer, or
its chunks. Every generation goes through GenerationService (limits, version, admission, metrics); nothing
here knows HTTP but the ApiErrors it raises."""
from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from core.keys import Caller
from core.state import restoring
from core.versions import VersionStore
from service.errors import ApiError, field_error
from service.generations import Admitted, Chosen, GenerationService, citation
from service.openai.protocol import (
    MODEL,
    AssistantMessage,
    ChatCompletionChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionStreamChoice,
    ChatCompletionStreamResponse,
    ChatMessage,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    CompletionStreamChoice,
    CompletionStreamResponse,
    DeltaMessage,
    ModelCard,
    ModelList,
    OpenAIRequest,
    UsageInfo,
)
from serving.generation import Generation, SamplingParams

PINNED = re.compile(r"^ckl-v(\d{1,10})$")  # longer numbers name no version (MAX_VERSION)
COMPLETION_TOKENS = 16  # OpenAI's default max_tokens for /v1/completions (chat defaults to the server's cap)
MAX_STOPS = 8
LISTED_VERSIONS = 100  # /v1/models lists the newest; a list of every version grows with every document
# A model without a chat template (a base model) gets the question-and-answer format it reads best, the one taught
# documents are trained to answer in (workers/questions.py: as_question; documented in docs/api.md).
PLAIN_CHAT = {"system": "{}\n", "user": "Question: {}\n", "assistant": "Answer: {}\n"}


def pinned_version(model: str) -> int | None:
    """None for the current version ("ckl"), N for "ckl-vN"; 404 for any other name."""
    if model == MODEL:
        return None
    if match := PINNED.match(model):
        return int(match.group(1))
    raise ApiError(404, "model_not_found", f"unknown model {model!r}: use {MODEL!r} or 'ckl-v<N>' (GET /v1/models)")


def fingerprint(version: int) -> str:
    return f"ckl-v{version}"


def chat_prompt(tokenizer: Any, messages: list[ChatMessage]) -> str:
    turns = [{"role": m.role, "content": m.content} for m in messages]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    return "".join(PLAIN_CHAT[t["role"]].format(t["content"]) for t in turns) + "Answer:"


def sampling_params(req: OpenAIRequest, default_tokens: int, tokens: int | None = None) -> SamplingParams:
    """The request's sampling; `tokens` (chat's max_completion_tokens) wins over max_tokens. 422 for what this
    server cannot honour."""
    if req.n != 1:
        raise field_error("n", "unsupported", "only n = 1 is supported")
    if req.logprobs:
        raise field_error("logprobs", "unsupported", "log-probabilities are not returned")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    return SamplingParams(tokens or req.max_tokens or default_tokens, req.temperature, req.top_p,
                          tuple(stop[:MAX_STOPS]), req.seed)


def usage(result: Generation) -> UsageInfo:
    return UsageInfo(prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
                     total_tokens=result.prompt_tokens + result.completion_tokens)


@dataclass
class Chunks:
    """A streamed answer: its chunks, and the generation to close when the response ends however it ends."""
    events: Iterator[CompletionStreamResponse] | Iterator[ChatCompletionStreamResponse]
    generation: Admitted


@dataclass
class Run:
    """A generation admitted for one request, and what every response to it carries."""
    pieces: Admitted  # text pieces, then the Generation (GenerationService.stream)
    version: int | None  # the version pinned by `model`, None for the current one
    id: str
    created: int
    model: str
    knowledge: Chosen  # what the request chose (its `knowledge`)

    def result(self) -> Generation:
        *_, last = self.pieces
        return last

    def tail(self, result: Generation) -> dict[str, Any]:
        """What the whole answer, or its last chunk, says of the generation: version, usage, knowledge used."""
        return {"system_fingerprint": fingerprint(result.knowledge_version), "usage": usage(result),
                "knowledge": citation(result, self.knowledge)}

    def head(self, item: str | Generation) -> dict[str, Any]:
        """The fields of the chunk sent for `item`. The last chunk carries usage (OpenAI sends usage only when
        asked, in a chunk of its own; a client that ignores unknown fields reads this one the same)."""
        head: dict[str, Any] = {"id": self.id, "created": self.created, "model": self.model}
        if isinstance(item, Generation):
            return {**head, **self.tail(item)}
        return {**head, "system_fingerprint": fingerprint(self.version) if self.version is not None else None}


def start(generations: GenerationService, req: OpenAIRequest, caller: Caller, prompt: str, id_prefix: str,
          default_tokens: int, tokens: int | None = None) -> Run:
    """Checked in this order: what cannot be honoured, the model name, the prompt's limits, then the knowledge
    and admission."""
    params = sampling_params(req, default_tokens, tokens)
    version = pinned_version(req.model)
    ids = generations.prompt_ids(prompt, params.max_new_tokens, tokens_field="max_tokens")
    pieces = generations.stream(ids, params, version, req.knowledge, caller, req.knowledge_as)
    return Run(pieces, version, f"{id_prefix}-{uuid.uuid4().hex}", int(time.time()), req.model, req.knowledge)


def completion(generations: GenerationService, req: CompletionRequest,
               caller: Caller) -> CompletionResponse | Chunks:
    prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
    if len(prompts) != 1:
        raise field_error("prompt", "unsupported", "one prompt per request")
    if not prompts[0].strip():
        raise field_error("prompt", "string_too_short", "must not be empty")
    run = start(generations, req, caller, prompts[0], "text", COMPLETION_TOKENS)
    if req.stream:
        return Chunks(completion_chunks(run), run.pieces)
    result = run.result()
    return CompletionResponse(id=run.id, created=run.created, model=run.model, **run.tail(result),
                              choices=[CompletionChoice(text=result.text, finish_reason=result.finish_reason)])


def completion_chunks(run: Run) -> Iterator[CompletionStreamResponse]:
    for item in run.pieces:
        done = isinstance(item, Generation)
        choice = CompletionStreamChoice(index=0, text="" if done else item,
                                        finish_reason=item.finish_reason if done else None)
        yield CompletionStreamResponse(**run.head(item), object="text_completion", choices=[choice])


def chat(generations: GenerationService, req: ChatCompletionRequest,
         caller: Caller) -> ChatCompletionResponse | Chunks:
    prompt = chat_prompt(generations.serving().tokenizer, req.messages)
    run = start(generations, req, caller, prompt, "chat", generations.settings.limits.max_new_tokens_cap,
                tokens=req.max_completion_tokens)
    if req.stream:
        return Chunks(chat_chunks(run), run.pieces)
    result = run.result()
    return ChatCompletionResponse(id=run.id, created=run.created, model=run.model, **run.tail(result),
                                  choices=[ChatCompletionChoice(message=AssistantMessage(content=result.text),
                                                                finish_reason=result.finish_reason)])


def chat_chunks(run: Run) -> Iterator[ChatCompletionStreamResponse]:
    for position, item in enumerate(run.pieces):
        done = isinstance(item, Generation)
        text = "" if done else item
        # The first delta names the role, as OpenAI's does; the others carry only content.
        delta = DeltaMessage(role="assistant", content=text) if position == 0 else DeltaMessage(content=text)
        choice = ChatCompletionStreamChoice(index=0, delta=delta, finish_reason=item.finish_reason if done else None)
        yield ChatCompletionStreamResponse(**run.head(item), object="chat.completion.chunk", choices=[choice])


def models(store: VersionStore) -> ModelList:
    """`ckl` and the newest LISTED_VERSIONS `ckl-vN` that can be asked (not the versions a removal took documents
    out of); an older one still answers by its name, and GET /versions lists them all."""
    hidden = restoring(store)
    listed = [v for v in store.versions() if v not in hidden][-LISTED_VERSIONS:]
    made = {v: store.manifest(v).get("created_at") or 0 for v in {*listed, store.current()}}
    names = [(MODEL, made[store.current()])] + [(fingerprint(v), made[v]) for v in listed]
    return ModelList(data=[ModelCard(id=name, created=int(at)) for name, at in names])
