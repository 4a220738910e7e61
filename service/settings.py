"""All configuration in one place, read from CKL_* environment variables."""
from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.auth import KeyConfig

DEFAULT_MODEL = "default"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_", extra="ignore")

    # Where the model comes from: "default" is the packaged Gemma 3 270M; anything else is a local
    # path or a Hugging Face hub id (the hub is only reached when such an id is configured).
    model: str = DEFAULT_MODEL
    data_dir: Path = Path("data")
    # The converted default model lives here; defaults to <data_dir>/models.
    model_cache_dir: Path | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    load_in_4bit: bool = False

    host: str = "127.0.0.1"
    port: int = 8000
    # Access (service/auth.py): keys by SHA-256 with scopes, a JSON list; none configured means open, and
    # then `ckl serve` binds loopback only unless allow_unauthenticated says otherwise.
    api_keys: list[KeyConfig] = Field(default_factory=list)
    allow_unauthenticated: bool = False
    # Host headers accepted; empty: loopback names when open and loopback-bound, any otherwise.
    allowed_hosts: list[str] = Field(default_factory=list)
    max_body_bytes: int = Field(1_048_576, gt=0)
    # Admission: past these, 429 with Retry-After.
    max_concurrent_generations: int = Field(16, gt=0)  # decoded together (service/model/batching.py)
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

    # The update method a document gets when it names none (a registered method: service/knowledge/methods).
    method: str = "routed"

    # Update method defaults: what forgot least while teaching facts one by one
    # (docs/decisions.md: Adapter updates: AdamW at 5e-5).
    lora_rank: int = Field(8, gt=0)
    lora_alpha: float = Field(16.0, gt=0)
    # Which projections carry the adapter (JSON list in the environment); empty: all attention and MLP ones.
    lora_targets: list[str] = Field(default_factory=list)
    optimizer: Literal["adamw", "sgd"] = "adamw"
    learning_rate: float = Field(5e-5, gt=0)
    max_steps: int = Field(32, gt=0)
    check_every: int = Field(2, gt=0)
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

    # The memory method (service/knowledge/memory.py, workers/methods/memory.py).
    memory_layer: int | None = Field(None, ge=0)  # decoder layer the memory sits beside; None: two thirds up
    memory_sub_keys: int = Field(256, gt=1)  # slots = this squared
    memory_heads: int = Field(4, gt=0)
    memory_k: int = Field(32, gt=0)
    memory_key_dim: int = Field(128, gt=1)
    # Sharpness of the slots' read weights (MemoryConfig.score_scale); sharper reads kept fewer of the taught
    # facts, so 1 (docs/decisions.md: Memory score scale 1).
    memory_score_scale: float = Field(1.0, gt=0)
    memory_top_t: int = Field(500, gt=0)  # value rows one batch may write
    memory_score: Literal["tfidf", "kl"] = "tfidf"
    # "Hub" slots, read at more than this share of the background's positions, are never written
    # (docs/decisions.md: Memory hub slots: a share of positions).
    memory_max_read_share: float = Field(0.02, ge=0, le=1)
    memory_learning_rate: float = Field(10.0, gt=0)  # plain SGD on the value rows

    # The routed method (service/knowledge/methods/routed.py): one low-rank delta per document, used only for
    # prompts whose rare words match the document's key with at least this weight (service/knowledge/routing.py).
    route_threshold: float = Field(2.0, gt=0)
    routed_rank: int = Field(4, gt=0)
    routed_alpha: float = Field(8.0, gt=0)
    routed_targets: list[str] = Field(default_factory=lambda: ["gate_proj", "up_proj", "down_proj"])
    routed_learning_rate: float = Field(1e-3, gt=0)  # AdamW, a fresh delta per document
    # Steps trained after the document's probes first pass: a margin, so paraphrases and the answer's later
    # tokens hold too. 0: stop as soon as they pass.
    routed_extra_steps: int = Field(4, ge=0)
    # Train-Attention's weights for the routed method sit on this floor (a share of the largest weight): every
    # token of the document is learned, phi's tokens most (docs/decisions.md: "The routed method's defaults").
    routed_weight_floor: float = Field(0.5, ge=0, le=1)

    # The gate. One point of NF accuracy is the most forgetting the served model may show, over all versions.
    nf_tolerance: float = Field(0.01, ge=0, le=1)
    learned_tolerance: float = Field(0.05, ge=0, le=1)
    require_own_probes: bool = True
    retry_on_rejection: bool = True  # once, as the rejection's reason suggests (workers/gate.py: retry_plan)

    @cached_property
    def models_dir(self) -> Path:
        return self.model_cache_dir or self.data_dir / "models"
