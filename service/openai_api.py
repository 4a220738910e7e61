"""OpenAI-compatible routes, so OpenAI clients work unchanged: /v1/completions, /v1/chat/completions (whole or
streamed, ending with `data: [DONE]`), /v1/models. `model` picks the knowledge version: `ckl` is the current
one, `ckl-vN` pins committed version N for that request (compare answers before and after a document);
`system_fingerprint` names the version that answered. Fields OpenAI defines and this server does not use are
ignored; values it cannot honour (n > 1, logprobs) are refused."""
from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Literal

from fastapi import Depends, FastAPI
from pydantic import BaseModel, ConfigDict, Field, field_validator

from service.answers import Answers
from service.errors import ApiError, field_error
from service.knowledge.state import restored_by
from service.model.generation import Generation, SamplingParams
from service.runtime import Runtime
from service.schemas import greedy_or_stable
from service.sse import event_stream

MODEL = "ckl"
PINNED = re.compile(r"^ckl-v(\d+)$")
# A model without a chat template gets this plain format (documented in the README).
PLAIN_CHAT = {"system": "System: {}\n", "user": "User: {}\n", "assistant": "Assistant: {}\n"}


class OpenAIRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = MODEL
    max_tokens: int | None = Field(None, gt=0)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = 1
    stream: bool = False
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, lt=2**63)
    logprobs: Any = None

    _temperature = field_validator("temperature")(greedy_or_stable)

    def sampling(self, default_tokens: int) -> SamplingParams:
        if self.n != 1:
            raise field_error("n", "unsupported", "only n = 1 is supported")
        if self.logprobs:
            raise field_error("logprobs", "unsupported", "log-probabilities are not returned")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(self.max_tokens or default_tokens, self.temperature, self.top_p, tuple(stop[:8]),
                              self.seed)


class CompletionRequest(OpenAIRequest):
    prompt: str | list[str]


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant"]
    content: str | list[dict[str, Any]]  # a string, or OpenAI's parts: only {"type": "text", "text": ...}

    @field_validator("content")
    @classmethod
    def _text(cls, value: str | list[dict[str, Any]]) -> str:
        if isinstance(value, str):
            return value
        if any(part.get("type") != "text" or not isinstance(part.get("text"), str) for part in value):
            raise ValueError("only text parts are supported")
        return "".join(part["text"] for part in value)


class ChatRequest(OpenAIRequest):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, gt=0)


def pinned_version(model: str) -> int | None:
    """None for the current version ("ckl"), N for "ckl-vN"; 404 for any other name."""
    if model == MODEL:
        return None
    if match := PINNED.match(model):
        return int(match.group(1))
    raise ApiError(404, "model_not_found", f"unknown model {model!r}: use {MODEL!r} or 'ckl-v<N>' (GET /v1/models)")


def chat_prompt(tokenizer, messages: list[Message]) -> str:
    turns = [{"role": m.role, "content": m.content} for m in messages]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    return "".join(PLAIN_CHAT[t["role"]].format(t["content"]) for t in turns) + "Assistant:"


def usage(result: Generation) -> dict[str, int]:
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens}


def install(app: FastAPI, runtime: Runtime, answers: Answers, needs: Callable[[str], Callable]) -> None:
    asker = [Depends(needs("generate"))]

    def run(req: OpenAIRequest, prompt: str, kind: str, piece: Callable[[str, bool], dict],
            whole: Callable[[str], dict],
            default_tokens: int = 16, tokens: int | None = None) -> Any:
        """The shared shape of both routes: one answer, or its chunks as events."""
        params = req.sampling(default_tokens)
        if tokens:
            params = SamplingParams(tokens, params.temperature, params.top_p, params.stop, params.seed)
        version = pinned_version(req.model)
        pieces = answers.stream(answers.prompt_ids(prompt, params.max_new_tokens, tokens_field="max_tokens"),
                                params, version)
        head = {"id": f"{kind[:4]}-{uuid.uuid4().hex}", "created": int(time.time()), "model": req.model}

        if not req.stream:
            *_, result = pieces
            return {**head, "object": kind, "system_fingerprint": f"ckl-v{result.knowledge_version}",
                    "choices": [{"index": 0, **whole(result.text), "finish_reason": result.finish_reason,
                                 "logprobs": None}],
                    "usage": usage(result)}

        def chunks() -> Iterator[dict[str, Any]]:
            # The last chunk carries finish_reason and usage (OpenAI sends usage only when asked, in a chunk of
            # its own; a client that ignores unknown fields reads this one the same).
            head["object"] = f"{kind}.chunk" if kind == "chat.completion" else kind
            first = True
            for item in pieces:
                if isinstance(item, Generation):
                    yield {**head, "system_fingerprint": f"ckl-v{item.knowledge_version}",
                           "choices": [{"index": 0, **piece("", first), "finish_reason": item.finish_reason}],
                           "usage": usage(item)}
                else:
                    yield {**head, "system_fingerprint": f"ckl-v{version}" if version is not None else None,
                           "choices": [{"index": 0, **piece(item, first), "finish_reason": None}]}
                first = False
        return event_stream(chunks(), done_marker=True)

    @app.post("/v1/completions", dependencies=asker)
    def completions(req: CompletionRequest) -> Any:
        prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
        if len(prompts) != 1:
            raise field_error("prompt", "unsupported", "one prompt per request")
        if not prompts[0].strip():
            raise field_error("prompt", "string_too_short", "must not be empty")
        return run(req, prompts[0], "text_completion", piece=lambda text, first: {"text": text},
                   whole=lambda text: {"text": text})

    @app.post("/v1/chat/completions", dependencies=asker)
    def chat_completions(req: ChatRequest) -> Any:
        prompt = chat_prompt(answers.serving().tokenizer, req.messages)
        return run(req, prompt, "chat.completion",
                   piece=lambda text, first: {"delta": {"role": "assistant", "content": text} if first
                                              else {"content": text}},
                   whole=lambda text: {"message": {"role": "assistant", "content": text}},
                   default_tokens=runtime.settings.max_new_tokens_cap, tokens=req.max_completion_tokens)

    @app.get("/v1/models", dependencies=asker)
    def models() -> dict[str, Any]:
        store = runtime.versions  # not the versions a removal took documents out of: they cannot be asked
        made = {v: store.manifest(v).get("created_at") or 0 for v in store.versions() if not restored_by(store, v)}
        names = [(MODEL, made[store.current()])] + [(f"ckl-v{v}", at) for v, at in made.items()]
        return {"object": "list", "data": [{"id": name, "object": "model", "created": int(at), "owned_by": "ckl-serve"}
                                           for name, at in names]}
