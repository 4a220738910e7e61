"""The adapter method's settings (CKL_ADAPTER_*): what forgot least while teaching facts one by one
(docs/decisions.md: Adapter updates: AdamW at 5e-5)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class AdapterSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_ADAPTER_", extra="forbid")

    rank: int = Field(8, gt=0, description="The adapter's rank.")
    alpha: float = Field(16.0, gt=0, description="The adapter's scale is alpha / rank.")
    targets: list[str] = Field(default_factory=list, description=(
        "Which projections carry the adapter (a JSON list); empty: all attention and MLP ones."))
    optimizer: Literal["adamw", "sgd"] = Field("adamw", description="The optimizer.")
    learning_rate: float = Field(5e-5, gt=0, description="The learning rate.")
