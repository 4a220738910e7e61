"""The memory method's settings (CKL_MEMORY_*)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class MemorySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_MEMORY_", extra="forbid")

    layer: int | None = Field(None, ge=0, description="The decoder layer the memory sits beside; none: two thirds up.")
    sub_keys: int = Field(256, gt=1, description="Sub-keys per half: the memory has this squared slots.")
    heads: int = Field(4, gt=0, description="The memory's read heads.")
    k: int = Field(32, gt=0, description="Slots read per head at each position.")
    key_dim: int = Field(128, gt=1, description="The dimension of a query and of a key.")
    score_scale: float = Field(1.0, gt=0, description=(
        "Sharpness of the slots' read weights; sharper reads kept fewer of the taught facts "
        "(docs/decisions.md: Memory score scale 1)."))
    top_t: int = Field(500, gt=0, description="Value rows one batch may write.")
    score: Literal["tfidf", "kl"] = Field("tfidf", description="How the slots specific to the text are ranked.")
    max_read_share: float = Field(0.02, ge=0, le=1, description=(
        "Hub slots, read at more than this share of the background's positions, are never written "
        "(docs/decisions.md: Memory hub slots: a share of positions)."))
    optimizer: Literal["sgd"] = Field("sgd", description=(
        "Plain SGD: Adam's moments would keep moving rows after they leave the top-t."))
    learning_rate: float = Field(10.0, gt=0, description="The learning rate.")
