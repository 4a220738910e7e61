"""The routed method's settings (CKL_ROUTED_*): one low-rank delta per document, used only for prompts routed to it
(core/routing/; the threshold is CKL_ROUTING_THRESHOLD)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class RoutedSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_ROUTED_", extra="forbid")

    rank: int = Field(4, gt=0, description="The rank of a document's delta.")
    alpha: float = Field(8.0, gt=0, description="The delta's scale is alpha / rank.")
    targets: list[str] = Field(default_factory=lambda: ["up_proj", "down_proj"], description=(
        "The projections a delta covers: a third of the size of every MLP projection, and as good on the tuning sets "
        "(docs/decisions.md: Smaller routed deltas)."))
    layers: str = Field("odd", pattern=r"^(all|odd|even|\d+(,\d+)*)$", description=(
        "The decoder layers a new document's delta covers: all, odd, even or indices (1,3,5); serving applies "
        "whatever a delta holds."))
    storage: Literal["float32", "bfloat16", "int8"] = Field("int8", description=(
        "How a committed delta is stored (storage.py): int8 keeps a quarter of float32's bytes and taught as well as "
        "bfloat16 (docs/decisions.md: Deltas in int8); the gate checks the rounded tensors."))
    resident: int = Field(512, ge=0, description=(
        "Documents whose tensors stay in memory, the least recently routed to read again when needed (0: all)."))
    optimizer: Literal["adamw"] = Field("adamw", description="A fresh optimizer per document's delta.")
    learning_rate: float = Field(1e-3, gt=0, description=(
        "The learning rate: at 3e-3 a paragraph is served a fifth to a third sooner, and short documents' paraphrases "
        "are lost (docs/decisions.md: The routed delta's learning rate)."))
    extra_steps: int = Field(4, ge=0, description=(
        "Steps trained after the document's probes first pass, so paraphrases and the answer's later tokens hold "
        "too (0: stop as soon as they pass)."))
    question_examples: bool = Field(True, description=(
        "Also train each probe asked as the question a reader types (\"X is managed by\" as \"Question: Who manages "
        "X?\\nAnswer: Y\") and, where its verb names a role, by the role (\"The manager of X is\"): a reader asks "
        "questions of what a document states (docs/decisions.md: Documents as people send them; A cloze asked as a "
        "reader asks it)."))
    knowledge_as: Literal["weights", "context", "both", "auto"] = Field("auto", description=(
        "How a request that does not say (its `knowledge_as`) is answered: `auto` answers a prompt routed to "
        "documents both ways, their deltas and their text, and gives the answer the text bears out (two decodes and "
        "the text's tokens), and any other prompt once, as weights; `weights` runs the deltas alone "
        "(docs/decisions.md: Both ways by default, where a prompt is routed)."))
    weight_floor: float = Field(0.5, ge=0, le=1, description=(
        "Train-Attention's weights sit on this floor (a share of the largest): every token is learned, phi's most "
        "(docs/decisions.md: The routed method's training defaults)."))
