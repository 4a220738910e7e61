"""phi's meta-training loop: `ckl train-attention` (research/train_attention/cli.py) and the benchmark's fold phis.

The rows (research/train_attention/rows.py) become examples whose trunk features are cached per uuid
(research/train_attention/caches.py); phi then takes `steps` meta steps (research/train_attention/step.py), is validated
every `validate_every` steps (research/train_attention/validation.py) and checkpointed every `checkpoint_every`, so
an interrupted run resumes (`--resume`) from its last checkpoint.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from core.model.loader import LoadedModel
from core.settings import Settings
from methods.adapter.training import AdapterMethod
from research.provenance import git_commit
from research.train_attention.caches import (
    alignments_cache_name,
    build_examples,
    cached_alignments,
    features_cache_name,
)
from research.train_attention.config import TrainConfig
from research.train_attention.rows import PAPER_RULE, DataRule, balance_weights, training_rows
from research.train_attention.step import new_head, phi_step
from research.train_attention.validation import reference_outer_losses, validate
from workers.train_attention import phi


def train(loaded: LoadedModel, train_config: TrainConfig, data: Path, out: Path, results_root: Path, model_name: str,
          resume: bool, rule: DataRule = PAPER_RULE) -> tuple[phi.PhiHead, dict[str, Any]]:
    loaded.model.set_attn_implementation("eager")  # the exact meta-gradient needs attention's double backward
    torch.manual_seed(train_config.seed)  # the adapter's A matrices, and phi's initial head
    method = AdapterMethod(loaded.model, loaded.tokenizer,
                           Settings(method_settings={"adapter": {"rank": train_config.lora_rank, "alpha": train_config.lora_alpha}}))
    model = method.model
    config = phi.default_config(loaded.model, train_config.head, train_config.trunk_layers)
    val_rows, train_rows, provenance = training_rows(loaded, train_config, data, results_root, model_name, rule)
    examples = build_examples(loaded, model, val_rows + train_rows, config, train_config.max_tokens,
                              out.parent / "cache" / features_cache_name(config, train_config.max_tokens))
    val_examples, train_examples = examples[: train_config.val], examples[train_config.val :]
    if train_config.balance:
        for ex, weight in zip(train_examples, balance_weights([(r.relation, r.object) for r in train_rows])):
            ex.weight = weight
    alignments = None
    if train_config.variant == "first-order":
        alignments = cached_alignments(model, examples, train_config.inner_lr,
                                       out.parent / "cache" / alignments_cache_name(train_config))

    head, optimizer = new_head(config, train_config)
    state_path = out / "state.pt"
    state: dict[str, Any] = {"step": 0, "history": [], "validation": [], "seconds": 0.0,
                             "reference": reference_outer_losses(model, val_examples, train_config)}
    if resume and state_path.exists():
        saved = torch.load(state_path, weights_only=False)
        head.load_state_dict(saved.pop("head"))
        optimizer.load_state_dict(saved.pop("optimizer"))
        state = saved
        print(f"resumed at step {state['step']}", file=sys.stderr)
    else:
        state["validation"].append({"step": 0, **validate(head, model, val_examples, train_config, alignments)})
    print(f"validation outer loss with uniform weights {state['reference']['uniform']}, "
          f"oracle weights {state['reference']['oracle']}", file=sys.stderr)

    def save() -> None:
        out.mkdir(parents=True, exist_ok=True)
        torch.save({**state, "head": head.state_dict(), "optimizer": optimizer.state_dict()}, state_path.with_suffix(".tmp"))
        state_path.with_suffix(".tmp").replace(state_path)
        (out / "curve.json").write_text(json.dumps({k: state[k] for k in ("history", "validation", "reference")}, indent=1))

    with tqdm(total=train_config.steps, initial=state["step"], desc=f"phi ({train_config.variant})") as bar:
        while state["step"] < train_config.steps:
            started = time.perf_counter()
            loss = phi_step(head, optimizer, model, train_examples, state["step"], train_config, alignments)
            state["seconds"] += time.perf_counter() - started
            state["step"] += 1
            state["history"].append({"step": state["step"], "loss": round(loss, 5)})
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}")
            if state["step"] % train_config.validate_every == 0 or state["step"] == train_config.steps:
                state["validation"].append({"step": state["step"],
                                            **validate(head, model, val_examples, train_config, alignments)})
                tqdm.write(f"step {state['step']}: {state['validation'][-1]}")
            if state["step"] % train_config.checkpoint_every == 0 or state["step"] == train_config.steps:
                save()
    save()
    return head, {"data": provenance, **{k: state[k] for k in ("validation", "reference")},
                  "train_seconds": round(state["seconds"], 1)}


def train_and_save(loaded: LoadedModel, train_config: TrainConfig, rule: DataRule, data: Path, out: Path,
                   results_root: Path, model_name: str, destination: Path, command: str, resume: bool = False) -> None:
    """Meta-train phi under `rule` and write it with its manifest: `ckl train-attention`, and the benchmark's
    cross-fitted phis (bench/lama_ckl/phis.py)."""
    head, record = train(loaded, train_config, data, out, results_root, model_name, resume, rule)
    phi.save_checkpoint(destination, head, {
        "base_model": phi.fingerprint(loaded.model), "model": model_name, "variant": train_config.variant,
        "command": command, "git_commit": git_commit(), "train": asdict(train_config), **record})
