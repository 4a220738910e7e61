"""The bodies of OpenAI's API that this server speaks, as pydantic models: requests (unknown fields ignored,
as OpenAI's clients send many) and responses, their fields in the order they are sent.

Streamed chunks are sent with exclude_unset (as vLLM sends them): a field a chunk was not given is left out of
its JSON, so a chunk model gives defaults only to what a chunk may leave out (`usage` but on the last chunk,
`role` but in the first delta); a None given stays in, as null.

Extensions on both sides: `knowledge` and `knowledge_as` in a request (the official client sends them with
`extra_body`) choose what answers and how as on /generate, and `knowledge` in a response (a whole one, or the last
chunk; the client keeps fields it does not know) says what answered."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from service.schemas import Knowledge, KnowledgeAs, KnowledgeChoice, greedy_or_stable, knowledge_choice

MODEL = "ckl"  # the current knowledge version; "ckl-v<N>" pins version N


# -- requests ----------------------------------------------------------------------------------------------------
class OpenAIRequest(BaseModel):
    """What both completion requests share: the version asked and the sampling."""
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
    knowledge: KnowledgeChoice = "auto"  # extension: the knowledge to answer with (/generate's field)
    knowledge_as: KnowledgeAs | None = None  # extension: weights, context, both or auto (/generate's field)

    _temperature = field_validator("temperature")(greedy_or_stable)
    _knowledge = field_validator("knowledge", mode="wrap")(knowledge_choice)


class CompletionRequest(OpenAIRequest):
    prompt: str | list[str]


class ChatMessage(BaseModel):
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


class ChatCompletionRequest(OpenAIRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, gt=0)


# -- responses ---------------------------------------------------------------------------------------------------
FinishReason = Literal["stop", "length"]


class UsageInfo(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: FinishReason
    logprobs: None = None


class CompletionResponse(BaseModel):
    id: str
    created: int
    model: str
    object: Literal["text_completion"] = "text_completion"
    system_fingerprint: str
    choices: list[CompletionChoice]
    usage: UsageInfo
    knowledge: Knowledge  # extension: what answered


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatCompletionChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason
    logprobs: None = None


class ChatCompletionResponse(BaseModel):
    id: str
    created: int
    model: str
    object: Literal["chat.completion"] = "chat.completion"
    system_fingerprint: str
    choices: list[ChatCompletionChoice]
    usage: UsageInfo
    knowledge: Knowledge  # extension: what answered


# Chunks: no defaults but on the fields a chunk may leave out (see the module's docstring).
class CompletionStreamChoice(BaseModel):
    index: int
    text: str
    finish_reason: FinishReason | None


class CompletionStreamResponse(BaseModel):
    id: str
    created: int
    model: str
    object: Literal["text_completion"]
    system_fingerprint: str | None  # null until the last chunk names the version that answered, unless pinned
    choices: list[CompletionStreamChoice]
    usage: UsageInfo | None = None
    knowledge: Knowledge | None = None  # extension, on the last chunk


class DeltaMessage(BaseModel):
    role: Literal["assistant"] | None = None
    content: str


class ChatCompletionStreamChoice(BaseModel):
    index: int
    delta: DeltaMessage
    finish_reason: FinishReason | None


class ChatCompletionStreamResponse(BaseModel):
    id: str
    created: int
    model: str
    object: Literal["chat.completion.chunk"]
    system_fingerprint: str | None
    choices: list[ChatCompletionStreamChoice]
    usage: UsageInfo | None = None
    knowledge: Knowledge | None = None  # extension, on the last chunk


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "ckl-serve"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None
    code: str


class ErrorResponse(BaseModel):
    """Every refusal under /v1 (service/errors.py sends it)."""
    error: ErrorInfo
