"""The adapter method's settings (CKL_ADAPTER_*): what forgot least while teaching facts one by one
(docs/decisions.md: Adapter updates: AdamW at 5e-5)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class AdapterSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_ADAPTER_", extra="forbid")

    rank: int = Field(8, gt=0)
    alpha: float = Field(16.0, gt=0)
    # Which projections carry the adapter (JSON list in the environment); empty: all attention and MLP ones.
    targets: list[str] = Field(default_factory=list)
    optimizer: Literal["adamw", "sgd"] = "adamw"
    learning_rate: float = Field(5e-5, gt=0)
