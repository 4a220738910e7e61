"""All configuration in one place, read from CKL_* environment variables: the top-level settings here, the groups in
core/settings_groups.py (CKL_<GROUP>_*), each method's own in methods/<name>/config.py (CKL_<METHOD>_*). Every one
of them, generated from these classes: docs/settings.md (docs/settings_table.py)."""
from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from core import registry
from core.keys import KeyConfig
from core.settings_groups import (
    GROUPS,
    EmbeddedSettings,
    GateSettings,
    LimitsSettings,
    TrainingSettings,
    group_of,
    renamed,
)

DEFAULT_MODEL = "default"
# Settings that moved into a group or a method's own settings: the old variable is refused, naming the new one.
RENAMED = {"CKL_LORA_RANK": "CKL_ADAPTER_RANK", "CKL_LORA_ALPHA": "CKL_ADAPTER_ALPHA",
           "CKL_LORA_TARGETS": "CKL_ADAPTER_TARGETS", "CKL_OPTIMIZER": "CKL_ADAPTER_OPTIMIZER",
           "CKL_LEARNING_RATE": "CKL_ADAPTER_LEARNING_RATE", "CKL_ROUTE_THRESHOLD": "CKL_ROUTING_THRESHOLD",
           "CKL_ROUTED_THRESHOLD": "CKL_ROUTING_THRESHOLD", **renamed()}


def grouped(name: str) -> str:
    """Where a setting passed by its name before it had a group is now (" (now training.max_steps)"), or ""."""
    return f" (now {found[0]}.{found[1]})" if (found := group_of(name)) else ""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_", extra="ignore")

    def __init__(self, **values: Any) -> None:
        # The environment may hold other CKL_* variables (a method's own), but a setting passed by name must exist,
        # and a renamed one must not be set under its old name (it would be ignored).
        if unknown := sorted(k for k in values if not k.startswith("_") and k not in type(self).model_fields):
            raise TypeError(f"unknown settings: {', '.join(f'{k}{grouped(k)}' for k in unknown)}")
        if old := sorted(name for name in RENAMED if name in os.environ):
            raise ValueError("renamed settings: " + ", ".join(f"{name} is now {RENAMED[name]}" for name in old))
        for group, cls in GROUPS.items():  # a group given as a dict: its other settings from the environment
            if isinstance(values.get(group), dict):
                values[group] = cls(**values[group])
        super().__init__(**values)

    model: str = Field(DEFAULT_MODEL, description=(
        "Where the model comes from: \"default\" is the packaged Gemma 3 270M; anything else is a local path or a "
        "Hugging Face hub id (the hub is reached only when such an id is configured)."))
    data_dir: Path = Field(Path("data"), description=(
        "The data folder: versions, probes, the SQLite database; with an object store, this process's caches only."))
    database_url: str | None = Field(None, description=(
        "The database of document records and idempotency keys, and with an object store of the versions and probe "
        "suites (a SQLAlchemy URL); default: SQLite in the data folder; PostgreSQL "
        "(postgresql+psycopg://user:password@host/db, the `postgres` extra) where several machines share one store."))
    object_store_url: str | None = Field(None, description=(
        "Versions in the database and deltas in an S3-compatible object store (s3://bucket/prefix, the `s3` extra; "
        "credentials and endpoint as boto3 reads them, or ?endpoint=http://host:port): processes on several "
        "machines share no folder. None: versions are folders in the data folder."))
    delta_cache_mb: int = Field(2048, gt=0, description=(
        "With an object store: the bytes of deltas each process keeps in <data_dir>/cache/deltas, least recently "
        "read first out."))
    model_cache_dir: Path | None = Field(None, description="The converted default model; default: <data_dir>/models.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where the model runs.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description=(
        "The model's dtype (auto: float32 on the CPU, docs/decisions.md: fp32 on the CPU)."))
    load_in_4bit: bool = Field(False, description="Load the model in 4 bits (bitsandbytes, on a GPU).")

    host: str = Field("127.0.0.1", description="The address `ckl serve` binds.")
    port: int = Field(8000, description="The port `ckl serve` binds.")
    api_keys: list[KeyConfig] = Field(default_factory=list, description=(
        "API keys by SHA-256 with scopes, a JSON list (`ckl keys new`); none configured means open, and then "
        "`ckl serve` binds loopback only unless allow_unauthenticated says otherwise."))
    allow_unauthenticated: bool = Field(False, description="Serve an open API on a non-loopback address.")
    allowed_hosts: list[str] = Field(default_factory=list, description=(
        "Host headers accepted; empty: loopback names when open and loopback-bound, any otherwise."))
    log_format: Literal["text", "json"] = Field("text", description="How log lines are written.")
    access_log: bool = Field(False, description=(
        "One line per request (method, route, status, milliseconds, request id)."))
    metrics: bool = Field(True, description="Prometheus counters and GET /metrics; off, /metrics answers 404.")
    router_engine_key: SecretStr | None = Field(None, description=(
        "The key `ckl router` sends its engine as a bearer token (vLLM's `--api-key`); the callers' keys are never "
        "passed on."))

    redis_url: str | None = Field(None, description=(
        "The learning queue on Redis (RQ) and `ckl worker`s; none: a thread of the API process learns (embedded)."))
    queue_name: str = Field("ckl", description="The RQ queues' name (the first lane's; the others add :1 to :7).")
    job_timeout_s: int = Field(1800, gt=0, description="Seconds one learning job may take before RQ stops it.")
    job_retries: int = Field(2, ge=0, description="Attempts a failed job gets again before its document fails.")
    version_poll_s: float = Field(2.0, gt=0, description=(
        "How often the API looks for a new version when no event announces it."))

    method: str = Field("routed", description=(
        "The update method a document gets when it names none (a registered method: methods/<name>/)."))
    routing_threshold: float = Field(2.0, gt=0, description=(
        "A prompt is routed to a document of a per-document method when the document's key terms it names weigh "
        "at least this much together (core/routing/)."))
    method_settings: dict[str, dict[str, Any]] = Field(default_factory=dict, description=(
        "Each method's own settings by method name, over its CKL_<METHOD>_* variables, e.g. "
        "{\"routed\": {\"rank\": 8}} (JSON)."))

    gate: GateSettings = Field(default_factory=GateSettings, description=(
        "The gate: what a candidate must keep to be committed."))
    training: TrainingSettings = Field(default_factory=TrainingSettings, description=(
        "The learning loop every method shares."))
    limits: LimitsSettings = Field(default_factory=LimitsSettings, description=(
        "Request, admission and queue limits."))
    embedded: EmbeddedSettings = Field(default_factory=EmbeddedSettings, description=(
        "The embedded learner beside the decoder."))

    @cached_property
    def models_dir(self) -> Path:
        return self.model_cache_dir or self.data_dir / "models"

    def model_post_init(self, _context: Any) -> None:
        if self.object_store_url and not self.database_url:
            raise ValueError("CKL_OBJECT_STORE_URL needs CKL_DATABASE_URL: the versions every process shares are in "
                             "that database (SQLite in one data folder would be one process's own)")

    def method_config(self, name: str) -> BaseSettings:
        """A registered method's settings: its environment (CKL_<NAME>_*), then `method_settings[name]`."""
        return registry.get(name).config(**self.method_settings.get(name, {}))
