"""The settings that come in groups, each read from its own CKL_<GROUP>_* variables: the gate, the learning loop every
method shares, the request and queue limits, and the embedded learner beside the decoder. `core.settings.Settings`
holds one of each."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class GateSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_GATE_", extra="forbid")

    nf_tolerance: float = Field(0.01, ge=0, le=1, description=(
        "The most NF accuracy the served model may lose against version 0, over all versions together."))
    learned_tolerance: float = Field(0.0, ge=0, le=1, description=(
        "The share of the learned facts that pass in the parent which a candidate may lose (a fact leaves the "
        "learned suite only when a later document replaces it or its document is removed)."))
    neighbour_tolerance: float = Field(0.0, ge=0, le=1, description=(
        "The share of neighbour prompts (a known subject's other facts) a candidate may change."))
    neighbour_tokens: int = Field(8, ge=0, description=(
        "Tokens of each neighbour prompt's continuation kept and compared (0: no neighbour prompts)."))
    require_own_probes: bool = Field(True, description="Every probe of the document must pass.")
    retry_on_rejection: bool = Field(True, description=(
        "A rejected document is tried once more as the rejection's reason suggests (workers/gate.py: retry_plan)."))


class TrainingSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_TRAINING_", extra="forbid")

    max_steps: int = Field(32, gt=0, description="The most training steps per document (it stops once its probes "
                                                  "pass).")
    check_every: int = Field(2, gt=0, description="Steps between two checks of the document's probes.")
    replay_rows: int = Field(2, ge=0, description=(
        "Rows of earlier facts replayed in each step beside all of the document's own (a method that trains on "
        "probes), those whose loss is highest "
        "(docs/decisions.md: Replay: the facts most at risk, a few rows per step)."))
    max_step_tokens: int = Field(512, gt=0, description=(
        "The tokens of a document's own examples in one step: a long document's windows come round in turn, its "
        "probes' examples are in every step (docs/decisions.md: A long document's cost is bounded)."))
    max_train_s: float = Field(150.0, gt=0, description=(
        "Seconds of training per attempt, after which the gate decides on what was trained."))
    max_grad_norm: float = Field(1.0, ge=0, description=(
        "Gradients clipped at this norm (0: off); a new fact's first gradients blow plain SGD up unclipped "
        "(docs/decisions.md: Gradient clipping at norm 1)."))
    window_tokens: int = Field(256, gt=8, description="The tokens of one training window of a document.")
    vocabulary_top_k: int = Field(256, ge=0, description=(
        "A training step's softmax runs over the targets, the model's this many first words at each trained "
        "position when the document's training begins, and each target's nearest output rows (core/vocabulary.py; "
        "docs/decisions.md: A step's softmax over the words that compete); 0: over the whole vocabulary."))
    vocabulary_neighbours: int = Field(64, gt=0, description=(
        "The output rows nearest each target (the largest dot product) that its step's softmax also runs over."))
    autocast: Literal["off", "bfloat16"] = Field("off", description=(
        "Training steps' forward and backward passes in bfloat16 autocast (the weights, the delta and what the gate "
        "scores stay float32); slower in the learner on this CPU "
        "(docs/decisions.md: A paragraph's training: what did not make it faster)."))
    weighting: Literal["train_attention", "uniform", "oracle"] = Field("train_attention", description=(
        "A document's token weights (a document may ask for another): train_attention (phi's weights), uniform, or "
        "oracle (1 on the answers of its probes where they occur in the text)."))
    phi_checkpoint: Path | None = Field(None, description=(
        "A phi checkpoint (path without suffix); default: the packaged one for the default model."))
    weight_threshold: float = Field(0.1, ge=0, lt=1, description=(
        "phi's weights below this share of the document's largest weight count as 0: no LM-head logits for them."))
    parallel: bool = Field(True, description=(
        "The learners of several workers train at once, each from the version current when it began; a candidate "
        "whose parent moved is committed on the new version where the versions committed meanwhile cannot meet it, "
        "else trained again (workers/stages/rebase.py). Off: they take turns on a lease, one job at a time."))


class LimitsSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_LIMITS_", extra="forbid")

    max_body_bytes: int = Field(1_048_576, gt=0, description="The largest request body.")
    requests_per_s: float = Field(20.0, ge=0, description=(
        "Requests one key's owner may send a second, on average, with keys configured (service/rate_limit.py); "
        "past it, 429 with Retry-After, given after a pause of up to 1 s. A request refused for what it asks "
        "(400, 413, 422, a busy 429) counts as four. 0: no limit."))
    request_burst: int = Field(100, gt=0, description="Requests one key may send at once before its rate applies.")
    max_concurrent_generations: int = Field(16, gt=0, description=(
        "Generations decoded together (serving/batching.py); past this and the waiting ones, 429 with Retry-After."))
    max_waiting_generations: int = Field(64, ge=0, description="Generations admitted, waiting for a decoding row.")
    max_generations_per_key: int = Field(32, gt=0, description=(
        "Generations one key's owner may have running or waiting at once, with keys configured; past it, 429."))
    prefill_share: float = Field(0.05, gt=0, le=1, description=(
        "While other keys' answers decode, one key's prompts over 256 tokens take at most this share of the "
        "decoder: they are prefilled 256 tokens at a time, and after each such chunk the key's next one waits "
        "(1 / share - 1) times as long as it took (serving/batching.py). 1: no wait."))
    max_queued_documents: int = Field(1000, gt=0, description="Documents queued or training, all keys together.")
    max_queued_per_key: int = Field(100, gt=0, description="Documents queued or training for one key.")
    max_must_keep_probes: int = Field(1000, gt=0, description="Must-keep probes (every job scores them all).")
    max_prompt_tokens: int = Field(2048, gt=0, description="The longest prompt, in tokens.")
    max_new_tokens_cap: int = Field(512, gt=0, description="The most tokens one answer may ask for.")
    max_prompt_chars: int = Field(32_000, gt=0, description="The longest prompt, in characters.")
    max_document_chars: int = Field(20_000, gt=0, description="The longest document, in characters.")
    max_probes_per_document: int = Field(16, gt=0, description="The most probes one document may carry.")


class EmbeddedSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_EMBEDDED_", extra="forbid")

    learn_share: float = Field(0.1, gt=0, le=1, description=(
        "While the API of the same process decodes, the embedded learner works at most this share of the time (it "
        "rests between training steps; 1: never rests)."))
    learner_threads: int = Field(1, ge=0, description=(
        "The embedded learner's PyTorch threads (0: PyTorch's count, every core); the decoder keeps PyTorch's count."))
    learner_idle_priority: bool = Field(True, description=(
        "The embedded learner's thread runs only on cores the decoder and the API leave idle (Linux's SCHED_IDLE)."))
    learner_every_core_while_idle: bool = Field(True, description=(
        "Once nothing has decoded for 10 s, the embedded learner's training steps and probe checks run on every core, "
        "each in a thread of its own that ends with it (no team of threads is left beside the decoder's): a paragraph "
        "is learned about 1.5 times faster on an idle server (docs/decisions.md)."))


GROUPS = {"gate": GateSettings, "training": TrainingSettings, "limits": LimitsSettings, "embedded": EmbeddedSettings}
# Each grouped setting's name before it had a group, for the message that refuses the old variable.
OLD_NAMES = {"training": {"window_tokens": "train_window_tokens", "phi_checkpoint": "train_attention_checkpoint"},
             "embedded": {"learn_share": "learn_share_while_serving", "learner_threads": "embedded_learner_threads",
                          "learner_idle_priority": "embedded_learner_idle_priority"}}


def group_of(name: str) -> tuple[str, str] | None:
    """The group and field of a grouped setting named by its field (max_steps) or its name before it had a group
    (learn_share_while_serving); None for any other name."""
    for group, cls in GROUPS.items():
        for field in cls.model_fields:
            if name in (field, OLD_NAMES.get(group, {}).get(field)):
                return group, field
    return None


def renamed() -> dict[str, str]:
    """Every grouped setting's old variable (CKL_MAX_STEPS) and its new one (CKL_TRAINING_MAX_STEPS)."""
    pairs = {f"CKL_{OLD_NAMES.get(group, {}).get(name, name).upper()}": f"CKL_{group.upper()}_{name.upper()}"
             for group, cls in GROUPS.items() for name in cls.model_fields}
    return {old: new for old, new in pairs.items() if old != new}  # CKL_EMBEDDED_LEARNER_THREADS kept its name
