"""phi, the Train-Attention model: one weight in (0, 1) for every token of a text.

The trunk is the frozen base model itself: phi reads the hidden states of three of its layers
(a third, two thirds and all the way up) and a small head turns them into `sigmoid(head(h))`.
Why this trunk (docs/decisions.md: phi reads the frozen base model): the worker already holds the
base model, so phi costs one forward pass of it and a ~120k-parameter head, not a second LM; the
trunk's features can be computed once per document and reused over every meta-training epoch; and
the checkpoint is only the head (0.5 MB). A weight belongs to the predicted token, so position 0
(never predicted) always gets 0.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft.tuners.tuners_utils import BaseTunerLayer
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PreTrainedModel

from service.knowledge.memory import ProductKeyMemory

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
# The packaged phi the learner uses. Both ship; `CKL_TRAIN_ATTENTION_CHECKPOINT` picks the other. This
# one weighs the answer most in more of the invented facts the service is taught than the exact one
# (docs/decisions.md: First-order phi is the default).
DEFAULT_VARIANT = "first-order"


def packaged_checkpoint(model: str, variant: str = DEFAULT_VARIANT) -> Path:
    """Where the checkpoint trained for `model` (a CKL_MODEL value) lives in the package."""
    return CHECKPOINTS / f"{model.replace('/', '_')}-{variant}"


class PhiMismatch(ValueError):
    """A checkpoint made for another base model."""


@dataclass(frozen=True)
class PhiConfig:
    layers: tuple[int, ...]  # indices into the trunk's hidden states (0 = embeddings)
    hidden_size: int  # the trunk's
    head_size: int = 64
    window: int = 512  # tokens per trunk pass; longer texts are weighed in overlapping windows
    overlap: int = 128


def default_config(model: PreTrainedModel) -> PhiConfig:
    n = model.config.num_hidden_layers
    return PhiConfig(layers=(n // 3, 2 * n // 3, n), hidden_size=model.config.hidden_size)


def fingerprint(model: PreTrainedModel) -> dict[str, Any]:
    """What identifies the base model phi was trained on: its shape and a hash of its first embedding rows,
    rounded to bf16 so that the same model loaded in fp32 or bf16 (the GPU's default) matches."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    rows = causal_lm.get_input_embeddings().weight[:16].detach().to("cpu", torch.bfloat16).float().contiguous()
    cfg = causal_lm.config
    return {"model_type": cfg.model_type, "hidden_size": cfg.hidden_size, "layers": cfg.num_hidden_layers,
            "vocab_size": cfg.vocab_size, "embedding_sha256": hashlib.sha256(rows.numpy().tobytes()).hexdigest()[:16]}


class PhiHead(nn.Module):
    """Per-layer normalised hidden states -> MLP -> one logit per token."""

    def __init__(self, config: PhiConfig) -> None:
        super().__init__()
        self.config = config
        self.mlp = nn.Sequential(nn.Linear(len(config.layers) * config.hidden_size, config.head_size), nn.GELU(),
                                 nn.Linear(config.head_size, 1))
        nn.init.zeros_(self.mlp[2].bias)  # every weight starts at 0.5

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """features [..., layers * hidden] -> weights [...] in (0, 1)."""
        return torch.sigmoid(self.mlp(features).squeeze(-1))


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


@contextlib.contextmanager
def base_only(model: nn.Module):
    """The frozen base model, with any attached adapter layers and memory switched off (the model may be a
    PEFT wrapper or the model PEFT injected its layers into)."""
    memories = [m for m in model.modules() if isinstance(m, ProductKeyMemory)]
    adapters = [m for m in model.modules() if isinstance(m, BaseTunerLayer) and not m.disable_adapters]
    for memory in memories:
        memory.enabled = False
    for layer in adapters:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for memory in memories:
            memory.enabled = True
        for layer in adapters:
            layer.enable_adapters(True)


@torch.no_grad()
def trunk_features(model: nn.Module, input_ids: list[int], config: PhiConfig) -> torch.Tensor:
    """[n_tokens, layers * hidden] features of one text, window by window."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    device = next(causal_lm.parameters()).device
    out = torch.empty(len(input_ids), len(config.layers) * config.hidden_size)
    with base_only(model):
        for start, end, keep in window_spans(len(input_ids), config.window, config.overlap):
            ids = torch.tensor([input_ids[start:end]], device=device)
            states = causal_lm.model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
            picked = [nn.functional.layer_norm(states[i][0].float(), (config.hidden_size,)) for i in config.layers]
            out[keep:end] = torch.cat(picked, dim=-1)[keep - start:].cpu()
    return out


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
        self.head = PhiHead(checkpoint.config)
        self.head.load_state_dict(checkpoint.state)
        self.head.eval()
        self.meta = checkpoint.meta

    @classmethod
    def from_path(cls, model: nn.Module, path: Path) -> TrainAttention:
        return cls(model, load_checkpoint(require(path)))

    @torch.no_grad()
    def weights(self, input_ids: list[int]) -> list[float]:
        if not input_ids:
            return []
        w = self.head(trunk_features(self.model, input_ids, self.head.config)).tolist()
        return [0.0, *w[1:]]
