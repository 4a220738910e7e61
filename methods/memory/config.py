"""The memory method's settings (CKL_MEMORY_*)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class MemorySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_MEMORY_", extra="forbid")

    layer: int | None = Field(None, ge=0)  # decoder layer the memory sits beside; None: two thirds up
    sub_keys: int = Field(256, gt=1)  # slots = this squared
    heads: int = Field(4, gt=0)
    k: int = Field(32, gt=0)
    key_dim: int = Field(128, gt=1)
    # Sharpness of the slots' read weights (layer.MemoryConfig.score_scale); sharper reads kept fewer of the taught
    # facts, so 1 (docs/decisions.md: Memory score scale 1).
    score_scale: float = Field(1.0, gt=0)
    top_t: int = Field(500, gt=0)  # value rows one batch may write
    score: Literal["tfidf", "kl"] = "tfidf"
    # "Hub" slots, read at more than this share of the background's positions, are never written
    # (docs/decisions.md: Memory hub slots: a share of positions).
    max_read_share: float = Field(0.02, ge=0, le=1)
    optimizer: Literal["sgd"] = "sgd"  # plain SGD: Adam's moments would keep moving rows after they leave the top-t
    learning_rate: float = Field(10.0, gt=0)
