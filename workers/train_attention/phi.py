"""phi, the Train-Attention model: one weight in (0, 1) for every token of a text.

The trunk is the frozen base model itself: phi reads the layer-normalised hidden states of several of
its layers and a small head turns them into `sigmoid(head(h))`. Why this trunk (docs/decisions.md:
phi reads the frozen base model): the worker already holds the base model, so phi costs one forward
pass of it and a small head, not a second LM; the trunk's features can be computed once per document
and reused over every meta-training epoch; and the checkpoint is only the head (its size: docs/decisions.md,
phi's head attends over the document).
Two heads (docs/decisions.md: phi's head attends over the document):
- `attention` (the default for new phis, the answer phi's): a projection, then one bidirectional self-attention block over the whole
  document, so a token's weight can depend on what comes after it (the trunk is causal: the state at
  an answer's last token has not seen the full stop that ends the clause);
- `mlp`: each token on its own (the first-order and exact phis; the service weighs with the first-order one).
A weight belongs to the predicted token, so position 0 (never predicted) always gets 0.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PreTrainedModel

from core.model.base_only import base_only

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
# The packaged phi the learner uses; `CKL_TRAINING_PHI_CHECKPOINT` picks another (the answer phi, the
# exact one and the paper-protocol ones ship beside it). The answer phi teaches more LAMA-ckl rows,
# cross-fitted, but this one weighs the answers of invented facts, documents like users send, far more
# (docs/decisions.md: phi learns where the answer is).
DEFAULT_VARIANT = "first-order"
HEADS = ("attention", "mlp")


def packaged_checkpoint(model: str, variant: str = DEFAULT_VARIANT) -> Path:
    """Where the checkpoint trained for `model` (a CKL_MODEL value) lives in the package."""
    return CHECKPOINTS / f"{model.replace('/', '_')}-{variant}"


def checkpoint_for(configured: Path | None, model: str) -> Path | None:
    """The checkpoint phi loads for a served model: the configured one (CKL_TRAINING_PHI_CHECKPOINT), else the
    packaged one; None when there is neither."""
    if configured is not None:
        return configured
    packaged = packaged_checkpoint(model)
    return packaged if packaged.with_suffix(".json").exists() else None


class PhiMismatch(ValueError):
    """A checkpoint made for another base model."""


@dataclass(frozen=True)
class PhiConfig:
    layers: tuple[int, ...]  # indices into the trunk's hidden states (0 = embeddings)
    hidden_size: int  # the trunk's
    head_size: int = 64
    window: int = 512  # tokens per trunk pass; longer texts are weighed in overlapping windows
    overlap: int = 128
    head: str = "mlp"  # one of HEADS; checkpoints written before there was a choice are mlp


def default_config(model: PreTrainedModel, head: str = "attention", n_layers: int = 9) -> PhiConfig:
    """`n_layers` hidden states evenly spaced up the trunk, ending at its last layer (9 of Gemma 3 270M's 18:
    every other one; 3: a third, two thirds and the top)."""
    n = model.config.num_hidden_layers
    layers = tuple(sorted({round(n * (i + 1) / n_layers) for i in range(n_layers)}))
    return PhiConfig(layers=layers, hidden_size=model.config.hidden_size, head=head)


def fingerprint(model: PreTrainedModel) -> dict[str, Any]:
    """What identifies the base model phi was trained on: its shape and a hash of its first embedding rows,
    rounded to bf16 so that the same model loaded in fp32 or bf16 (the GPU's default) matches."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    rows = causal_lm.get_input_embeddings().weight[:16].detach().to("cpu", torch.bfloat16).float().contiguous()
    cfg = causal_lm.config
    return {"model_type": cfg.model_type, "hidden_size": cfg.hidden_size, "layers": cfg.num_hidden_layers,
            "vocab_size": cfg.vocab_size, "embedding_sha256": hashlib.sha256(rows.numpy().tobytes()).hexdigest()[:16]}


class MlpHead(nn.Module):
    """Per-layer normalised hidden states -> MLP -> one logit per token, each token on its own."""

    def __init__(self, config: PhiConfig) -> None:
        super().__init__()
        self.config = config
        self.mlp = nn.Sequential(nn.Linear(len(config.layers) * config.hidden_size, config.head_size), nn.GELU(),
                                 nn.Linear(config.head_size, 1))
        nn.init.zeros_(self.mlp[2].bias)  # every weight starts at 0.5

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """features [..., layers * hidden] -> weights [...] in (0, 1)."""
        return torch.sigmoid(self.mlp(features).squeeze(-1))


class AttentionHead(nn.Module):
    """Per-layer normalised hidden states -> projection -> one pre-norm self-attention block over every
    token of the document (no causal mask) -> one logit per token. The attention is written out rather
    than taken from nn.MultiheadAttention so that the exact meta-gradient can differentiate it twice."""

    HEADS = 4

    def __init__(self, config: PhiConfig) -> None:
        super().__init__()
        self.config = config
        d = config.head_size
        self.proj = nn.Linear(len(config.layers) * config.hidden_size, d)
        self.norm_attend, self.qkv, self.mix = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.norm_ff = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.out = nn.Linear(d, 1)
        nn.init.zeros_(self.out.bias)  # every weight starts near 0.5

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """features [tokens, layers * hidden] (one document) -> weights [tokens] in (0, 1)."""
        h = nn.functional.gelu(self.proj(features))
        h = h + self.mix(attend(self.qkv(self.norm_attend(h)), self.HEADS))
        h = h + self.ff(self.norm_ff(h))
        return torch.sigmoid(self.out(h).squeeze(-1))


def attend(qkv: torch.Tensor, heads: int) -> torch.Tensor:
    """Multi-head softmax attention of every token over every token: qkv [tokens, 3 * d] -> [tokens, d]."""
    q, k, v = qkv.unflatten(-1, (3, heads, -1)).unbind(-3)  # each [tokens, heads, d / heads]
    scores = torch.einsum("qhc,khc->hqk", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("hqk,khc->qhc", scores.softmax(-1), v).flatten(-2)


PhiHead = MlpHead | AttentionHead


def make_head(config: PhiConfig) -> PhiHead:
    if config.head not in HEADS:
        raise ValueError(f"unknown phi head {config.head!r}: one of {', '.join(HEADS)}")
    return AttentionHead(config) if config.head == "attention" else MlpHead(config)


def window_spans(n_tokens: int, window: int, overlap: int) -> list[tuple[int, int, int]]:
    """(start, end, keep_from) per window: each token takes its weight from the first window where it has
    at least `overlap` tokens of left context (or from the first window), so no token is dropped."""
    spans, start = [], 0
    while True:
        end = min(start + window, n_tokens)
        spans.append((start, end, start + overlap if start else 0))
        if end >= n_tokens:
            return spans
        start = end - overlap


Work = Callable[[Callable[[], torch.Tensor]], torch.Tensor]


def at_once(work: Callable[[], torch.Tensor]) -> torch.Tensor:
    return work()


@torch.no_grad()
def trunk_features(model: nn.Module, input_ids: list[int], config: PhiConfig,
                   each_window: Work = at_once) -> torch.Tensor:
    """[n_tokens, layers * hidden] features of one text, window by window; `each_window(work)` runs one window's
    pass (a server's: under its decoding lock, so decoding steps go on between two windows)."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    device = next(causal_lm.parameters()).device
    out = torch.empty(len(input_ids), len(config.layers) * config.hidden_size)

    def window(start: int, end: int) -> torch.Tensor:
        with base_only(model):
            ids = torch.tensor([input_ids[start:end]], device=device)
            return layer_features(causal_lm.model(input_ids=ids, output_hidden_states=True, use_cache=False)
                                  .hidden_states, config)[0].cpu()

    for start, end, keep in window_spans(len(input_ids), config.window, config.overlap):
        out[keep:end] = each_window(partial(window, start, end))[keep - start:]
    return out


def layer_features(hidden_states: tuple[torch.Tensor, ...], config: PhiConfig) -> torch.Tensor:
    """The layers phi reads, each layer-normalised, side by side: [..., tokens, layers * hidden]."""
    return torch.cat([nn.functional.layer_norm(hidden_states[i].float(), (config.hidden_size,))
                      for i in config.layers], dim=-1)


@dataclass
class Checkpoint:
    config: PhiConfig
    state: dict[str, torch.Tensor]
    meta: dict[str, Any] = field(default_factory=dict)


def save_checkpoint(path: Path, head: PhiHead, meta: dict[str, Any]) -> None:
    """`path`.safetensors (the head) and `path`.json (config, base model fingerprint, provenance)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}, str(path.with_suffix(".safetensors")))
    config = asdict(head.config)
    path.with_suffix(".json").write_text(json.dumps({"config": config, **meta}, indent=2) + "\n")


def require(path: Path) -> Path:
    """`path`, or FileNotFoundError saying how to make the checkpoint."""
    if not path.with_suffix(".json").exists():
        raise FileNotFoundError(f"no Train-Attention checkpoint at {path}.json: train one with `ckl train-attention`")
    return path


def load_checkpoint(path: Path) -> Checkpoint:
    meta = json.loads(path.with_suffix(".json").read_text())
    raw = meta.pop("config")
    config = PhiConfig(**{**raw, "layers": tuple(raw["layers"])})
    return Checkpoint(config, load_file(str(path.with_suffix(".safetensors"))), meta)


class TrainAttention:
    """Inference: the weights of a text's tokens under a trained phi."""

    def __init__(self, model: nn.Module, checkpoint: Checkpoint) -> None:
        expected, actual = checkpoint.meta.get("base_model", {}), fingerprint(model)
        if expected != actual:
            raise PhiMismatch(f"this Train-Attention checkpoint was trained on another base model "
                              f"({expected or 'unknown'}), not on the one loaded ({actual}); "
                              "train one for it with `ckl train-attention`")
        self.model = model
        self.head = make_head(checkpoint.config)
        self.head.load_state_dict(checkpoint.state)
        self.head.eval()
        self.meta = checkpoint.meta

    @classmethod
    def from_path(cls, model: nn.Module, path: Path) -> TrainAttention:
        return cls(model, load_checkpoint(require(path)))

    @torch.no_grad()
    def weights(self, input_ids: list[int], each_window: Work = at_once) -> list[float]:
        if not input_ids:
            return []
        config = self.head.config
        features, w = trunk_features(self.model, input_ids, config, each_window), torch.empty(len(input_ids))
        # The head reads one trunk window at a time, as in training (whose documents fit one window): the
        # attention head's cost stays bounded on long texts.
        for start, end, keep in window_spans(len(input_ids), config.window, config.overlap):
            w[keep:end] = self.head(features[start:end])[keep - start:]
        return [0.0, *w[1:].tolist()]
