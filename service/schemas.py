"""Request and response bodies of the HTTP API. Unknown fields are refused everywhere."""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidatorFunctionWrapHandler, field_validator

from core import registry

WEIGHTINGS = ("train_attention", "uniform", "oracle")
MIN_TEMPERATURE = 0.01  # below it, logits / temperature overflow to inf: greedy (0) is the way to ask for that
DOCUMENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what ids look like; anything else names no document
# A list entry of this form (`supersedes`, `knowledge`) names a document; any other, a probe prompt or a subject.
DOCUMENT_NAME = re.compile(r"[0-9a-f]{16}")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or whitespace")
    return value


def greedy_or_stable(value: float) -> float:
    if 0 < value < MIN_TEMPERATURE:
        raise ValueError(f"must be 0 (greedy) or at least {MIN_TEMPERATURE}")
    return value


# "auto": the prompt's routes; "off": the base model; else documents by id and subjects by name (their deltas only).
KnowledgeChoice = Literal["auto", "off"] | Annotated[
    list[Annotated[str, Field(min_length=1, max_length=200)]], Field(min_length=1, max_length=16)]


def knowledge_choice(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """One clear error for a `knowledge` that is neither of the union's shapes (pydantic gives one per shape)."""
    try:
        return handler(value)
    except ValidationError:
        raise ValueError('"auto", "off", or a list of 1 to 16 document ids and subject names (1 to 200 '
                         'characters each)') from None


# How a request's knowledge answers: as the documents' deltas, as their text before the prompt, or both ways at once,
# the surer answer given; auto: both where the prompt is routed to documents, else as weights (service/in_context.py).
KnowledgeAs = Literal["weights", "context", "both", "auto"]


class UsedKnowledge(BaseModel):
    """One delta an answer used: a routed document (its route score and the key terms the prompt named), or a
    method's whole learned state (`whole_version`)."""
    method: str
    document_id: str | None
    score: float | None = None
    terms: list[str] = []
    whole_version: bool = False


class Knowledge(BaseModel):
    """What answered: the knowledge version, what the request chose, the deltas that were on, and the documents
    whose text was put before the prompt."""
    version: int
    chosen: KnowledgeChoice
    used: list[UsedKnowledge]
    knowledge_as: KnowledgeAs = "weights"
    context: list[str] = []
    answered_as: Literal["context", "weights"] = "weights"  # the way whose answer was given (with both: the surer)


class GenerateRequest(Strict):
    prompt: str = Field(min_length=1)
    max_new_tokens: int = Field(64, gt=0)
    temperature: float = Field(0.0, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stop: list[str] = Field(default_factory=list, max_length=8)
    seed: int | None = Field(None, ge=0, lt=2**63)  # torch's generator takes a signed 64-bit seed
    stream: bool = False  # Server-Sent Events: {"text"} pieces, then {"done": true, usage, knowledge}
    knowledge: KnowledgeChoice = "auto"
    # The knowledge as weights, as context before the prompt, or both (None: the server's, CKL_ROUTED_KNOWLEDGE_AS).
    knowledge_as: KnowledgeAs | None = None

    _prompt = field_validator("prompt")(not_blank)
    _temperature = field_validator("temperature")(greedy_or_stable)
    _knowledge = field_validator("knowledge", mode="wrap")(knowledge_choice)


class GenerateResponse(BaseModel):
    text: str
    prompt_tokens: int
    completion_tokens: int
    knowledge_version: int
    finish_reason: Literal["stop", "length"]
    timing: dict[str, float]
    knowledge: Knowledge


class ProbeIn(Strict):
    prompt: str = Field(min_length=1, max_length=2000)
    answer: str = Field(min_length=1, max_length=200)

    _blank = field_validator("prompt", "answer")(not_blank)


class DocumentRequest(Strict):
    text: str = Field(min_length=1)
    probes: list[ProbeIn] = Field(default_factory=list)
    # A registered, servable update method; None: the server's default (CKL_METHOD).
    method: str | None = None
    # None: the server's default (CKL_TRAINING_WEIGHTING).
    weighting: Literal[WEIGHTINGS] | None = None  # type: ignore[valid-type]
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)
    # What this document replaces: the caller's document ids (all their facts) and/or probe prompts. A probe with
    # the prompt of a learned fact and another answer replaces that fact without being named here.
    supersedes: list[Annotated[str, Field(min_length=1, max_length=2000)]] = Field(default_factory=list, max_length=16)

    _text = field_validator("text")(not_blank)

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str | None) -> str | None:
        if value is not None and value not in registry.servable():
            raise ValueError(f"unknown method {value!r}; one of: {', '.join(registry.servable())}")
        return value


class Cost(BaseModel):
    """What learning a document will cost, known at POST: its tokens (its layout folded, as the learner reads it),
    the documents queued before it, and the most seconds of training it may take (CKL_TRAINING_MAX_TRAIN_S per
    training, and one more training after a rejection that suggests one, where CKL_GATE_RETRY_ON_REJECTION allows
    it)."""
    tokens: int
    documents_ahead: int
    train_s_at_most: float


class DocumentAccepted(BaseModel):
    document_id: str
    job_id: str | None
    status: str
    status_url: str
    cost: Cost | None = None  # for a new document (a repeated idempotency key answers the record as it is)


class MadeProbe(BaseModel):
    prompt: str
    answer: str


class DocumentPreview(BaseModel):
    method: str
    # For a document without probes, the probes the learner would make from its text; None where it makes none.
    auto_probes: list[MadeProbe] | None
    cost: Cost


class ActivateRequest(Strict):
    # Activating a version from before a removal brings the removed documents back: only when asked.
    force: bool = False


class ProbesRequest(Strict):
    probes: list[ProbeIn] = Field(min_length=1, max_length=500)
