"""All configuration in one place, read from CKL_* environment variables."""
from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from core import registry
from core.keys import KeyConfig

DEFAULT_MODEL = "default"
# Settings that moved into a method's own settings (methods/<name>/config.py).
RENAMED = {"CKL_LORA_RANK": "CKL_ADAPTER_RANK", "CKL_LORA_ALPHA": "CKL_ADAPTER_ALPHA",
           "CKL_LORA_TARGETS": "CKL_ADAPTER_TARGETS", "CKL_OPTIMIZER": "CKL_ADAPTER_OPTIMIZER",
           "CKL_LEARNING_RATE": "CKL_ADAPTER_LEARNING_RATE", "CKL_ROUTE_THRESHOLD": "CKL_ROUTING_THRESHOLD",
           "CKL_ROUTED_THRESHOLD": "CKL_ROUTING_THRESHOLD"}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_", extra="ignore")

    def __init__(self, **values: Any) -> None:
        # The environment may hold other CKL_* variables (a method's own), but a setting passed by name must exist,
        # and a renamed one must not be set under its old name (it would be ignored).
        if unknown := sorted(k for k in values if not k.startswith("_") and k not in type(self).model_fields):
            raise TypeError(f"unknown settings: {', '.join(unknown)}")
        if old := sorted(name for name in RENAMED if name in os.environ):
            raise ValueError("renamed settings: " + ", ".join(f"{name} is now {RENAMED[name]}" for name in old))
        super().__init__(**values)

    # Where the model comes from: "default" is the packaged Gemma 3 270M; anything else is a local
    # path or a Hugging Face hub id (the hub is only reached when such an id is configured).
    model: str = DEFAULT_MODEL
    data_dir: Path = Path("data")
    # The database of document records and idempotency keys (a SQLAlchemy URL); default: SQLite in the data
    # folder (ckl.db); PostgreSQL (postgresql+psycopg://user:password@host/db, the `postgres` extra) where
    # several machines share one store.
    database_url: str | None = None
    # The converted default model lives here; defaults to <data_dir>/models.
    model_cache_dir: Path | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    load_in_4bit: bool = False

    host: str = "127.0.0.1"
    port: int = 8000
    # Access (core/keys.py, service/auth.py): keys by SHA-256 with scopes, a JSON list; none configured means open, and
    # then `ckl serve` binds loopback only unless allow_unauthenticated says otherwise.
    api_keys: list[KeyConfig] = Field(default_factory=list)
    allow_unauthenticated: bool = False
    # Host headers accepted; empty: loopback names when open and loopback-bound, any otherwise.
    allowed_hosts: list[str] = Field(default_factory=list)
    max_body_bytes: int = Field(1_048_576, gt=0)
    # Admission: past these, 429 with Retry-After.
    max_concurrent_generations: int = Field(16, gt=0)  # decoded together (serving/batching.py)
    max_waiting_generations: int = Field(64, ge=0)  # admitted, waiting for one of those rows
    max_queued_documents: int = Field(1000, gt=0)  # queued or training, all keys together
    max_queued_per_key: int = Field(100, gt=0)
    max_must_keep_probes: int = Field(1000, gt=0)  # every job scores them all: a cap keeps jobs bounded
    log_format: Literal["text", "json"] = "text"
    access_log: bool = False  # one line per request (method, route, status, milliseconds, request id)
    metrics: bool = True  # Prometheus counters and GET /metrics; off, /metrics answers 404

    max_prompt_tokens: int = Field(2048, gt=0)
    max_new_tokens_cap: int = Field(512, gt=0)
    max_prompt_chars: int = Field(32_000, gt=0)

    # Learning loop.
    redis_url: str | None = None
    queue_name: str = "ckl"
    job_timeout_s: int = Field(1800, gt=0)
    job_retries: int = Field(2, ge=0)
    max_document_chars: int = Field(20_000, gt=0)
    max_probes_per_document: int = Field(16, gt=0)
    version_poll_s: float = Field(2.0, gt=0)

    # The update method a document gets when it names none (a registered method: methods/<name>/).
    method: str = "routed"
    # A prompt is routed to a document of a per-document method when the document's key terms it names weigh at least
    # this much together (core/routing/).
    routing_threshold: float = Field(2.0, gt=0)

    # The learning loop every method shares.
    max_steps: int = Field(32, gt=0)
    check_every: int = Field(2, gt=0)
    # Rows of earlier facts replayed in each step beside all of the document's own (a method that trains on
    # probes), those whose loss was highest: a step costs the same for the tenth document about a subject as for
    # the first (docs/decisions.md: "Replay: the facts most at risk, a few rows per step").
    replay_rows: int = Field(2, ge=0)
    # What one document may cost, however long it is: the tokens of its own examples in one step (a long
    # document's windows come round in turn; its probes' examples are in every step), and the seconds of training
    # per attempt, after which the gate decides on what was trained (a long document no longer holds the learner
    # for an hour; docs/decisions.md: "A long document's cost is bounded").
    max_step_tokens: int = Field(512, gt=0)
    max_train_s: float = Field(150.0, gt=0)
    # While the API of the same process decodes, the embedded learner works at most this share of the time (it
    # rests between training steps; 1: never). Learning and serving share this machine's cores otherwise.
    learn_share_while_serving: float = Field(0.1, gt=0, le=1)
    # The embedded learner's PyTorch threads (0: PyTorch's count, every core), the decoder's being PyTorch's count.
    embedded_learner_threads: int = Field(1, ge=0)
    # The embedded learner's thread runs only on cores the decoder and the API leave idle (Linux's SCHED_IDLE).
    embedded_learner_idle_priority: bool = True
    # A new fact's first gradients are large enough to blow plain SGD up unclipped
    # (docs/decisions.md: Gradient clipping at norm 1). 0 turns it off.
    max_grad_norm: float = Field(1.0, ge=0)
    train_window_tokens: int = Field(256, gt=8)
    # Token weights of a document (a document may ask for another): train_attention (phi's weights),
    # uniform, or oracle (1 on the answers of the document's probes where they occur in the text).
    weighting: Literal["train_attention", "uniform", "oracle"] = "train_attention"
    # A phi checkpoint (path without suffix); default: the packaged one for the default model.
    train_attention_checkpoint: Path | None = None
    # phi's weights below this share of the document's largest weight count as 0: no LM-head logits for them.
    weight_threshold: float = Field(0.1, ge=0, lt=1)

    # Each method's own settings come from CKL_<METHOD>_* (methods/<name>/config.py); these override them by
    # method name, e.g. {"routed": {"rank": 8}} (JSON in CKL_METHOD_SETTINGS).
    method_settings: dict[str, dict[str, Any]] = Field(default_factory=dict)

    # The gate. One point of NF accuracy is the most forgetting the served model may show, over all versions.
    nf_tolerance: float = Field(0.01, ge=0, le=1)
    # The share of the learned facts that pass in the parent which a candidate may lose (a fact leaves the
    # learned suite only when a later document replaces it or its document is removed).
    learned_tolerance: float = Field(0.0, ge=0, le=1)
    # The share of neighbour prompts (a known subject's other facts: workers/neighbours.py) a candidate may change, and
    # how many tokens of each one's continuation are kept.
    neighbour_tolerance: float = Field(0.0, ge=0, le=1)
    neighbour_tokens: int = Field(8, ge=0)  # 0: no neighbour prompts
    require_own_probes: bool = True
    retry_on_rejection: bool = True  # once, as the rejection's reason suggests (workers/gate.py: retry_plan)

    @cached_property
    def models_dir(self) -> Path:
        return self.model_cache_dir or self.data_dir / "models"

    def method_config(self, name: str) -> BaseSettings:
        """A registered method's settings: its environment (CKL_<NAME>_*), then `method_settings[name]`."""
        return registry.get(name).config(**self.method_settings.get(name, {}))
