"""The routed method's settings (CKL_ROUTED_*): one low-rank delta per document, used only for prompts routed to it
(core/routing/; the threshold is CKL_ROUTING_THRESHOLD)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class RoutedSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_ROUTED_", extra="forbid")

    rank: int = Field(4, gt=0)
    alpha: float = Field(8.0, gt=0)
    # A third of the size of every MLP projection of every layer, and as good on the tuning sets (docs/decisions.md:
    # "Smaller routed deltas").
    targets: list[str] = Field(default_factory=lambda: ["up_proj", "down_proj"])
    # The decoder layers a new document's delta covers: "all", "odd", "even" or indices ("1,3,5"). Serving applies
    # whatever layers and MLP projections a delta holds.
    layers: str = Field("odd", pattern=r"^(all|odd|even|\d+(,\d+)*)$")
    # How a committed delta is stored (storage.py): int8 keeps a quarter of float32's bytes and taught as well as
    # bfloat16 on the tuning sets (docs/decisions.md: "Deltas in int8"); the trained tensors are rounded to it
    # before the gate, so the gate checks what will be served.
    storage: Literal["float32", "bfloat16", "int8"] = "int8"
    # Documents whose tensors stay in memory, the least recently routed to read again from their version when
    # needed (0: all). A process's memory then follows use, not the number of documents taught.
    resident: int = Field(512, ge=0)
    optimizer: Literal["adamw"] = "adamw"  # a fresh delta per document
    learning_rate: float = Field(1e-3, gt=0)
    # Steps trained after the document's probes first pass: a margin, so paraphrases and the answer's later
    # tokens hold too. 0: stop as soon as they pass.
    extra_steps: int = Field(4, ge=0)
    # Train-Attention's weights sit on this floor (a share of the largest weight): every token of the document is
    # learned, phi's tokens most (docs/decisions.md: "The routed method's training defaults").
    weight_floor: float = Field(0.5, ge=0, le=1)
