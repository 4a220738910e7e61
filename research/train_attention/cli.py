"""`ckl train-attention`: meta-train phi on (evidence, task) pairs of LAMA-ckl.

Which rows (`--rule`, `--folds`, `--balance`): research/train_attention/rows.py. What phi learns per step
(`--variant`): research/train_attention/step.py and meta.py. The loop, its validation, checkpoints and `--resume`:
research/train_attention/training.py; the features and alignments cached per uuid: caches.py. The LAMA-ckl folder
is `--data`, else CKL_LAMA_DIR.
"""
from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from core.model.loader import load_model
from core.settings import Settings
from research import lama_ckl
from research.provenance import RESULTS_ROOT
from research.train_attention import folds
from research.train_attention.config import VARIANTS, TrainConfig
from research.train_attention.rows import RULES, DataRule
from research.train_attention.training import train_and_save
from workers.train_attention import phi


def run_name(variant: str, rule: DataRule) -> str:
    """The run folder's name: one per variant and rule, so runs of different data never resume each other."""
    if rule.rule == "paper":
        return variant
    return f"{variant}-{rule.rule}" + (f"-{rule.split}-k{rule.folds}-seed{rule.fold_seed}-fold{rule.hold_out}"
                                       if rule.folds else "")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ckl train-attention", description=__doc__.split("\n")[0])
    defaults = TrainConfig()
    parser.add_argument("--variant", choices=VARIANTS, default=defaults.variant)
    parser.add_argument("--model", default="default", help="base model (as CKL_MODEL)")
    for name in ("steps", "batch", "lr", "inner_lr", "max_tokens", "val", "val_outer", "validate_every",
                 "checkpoint_every", "seed"):
        value = getattr(defaults, name)
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--head", choices=phi.HEADS, default=defaults.head, help="attention: one self-attention "
                        "block over the document; mlp: each token on its own")
    parser.add_argument("--trunk-layers", type=int, default=defaults.trunk_layers, help="hidden states phi reads, "
                        "evenly spaced up the base model")
    parser.add_argument("--balance", action="store_true", help="weigh each pair by 1 / (pairs with its relation "
                        "and answer)")
    parser.add_argument("--rule", choices=RULES, default="paper", help="paper: invariant rows only (the paper's "
                        "protocol); with-variant: also the rows of variant_dev (the TO-LEARN pool)")
    parser.add_argument("--folds", type=int, default=0, help="with-variant: cut variant_dev into K folds and hold "
                        "one out (default 0: train on all of it)")
    parser.add_argument("--hold-out", type=int, default=0, help="with --folds: the fold left out (0..K-1)")
    parser.add_argument("--split", choices=folds.SPLITS, default="uuid", help="with --folds: by uuid, or by "
                        "(relation, answer) group")
    parser.add_argument("--fold-seed", type=int, default=0, help="with --folds: the folds' seed")
    lama_ckl.add_data_argument(parser)
    parser.add_argument("--out", type=Path, help="run folder (default bench-results/train-attention/<variant>, "
                        "and the rule and fold after it)")
    parser.add_argument("--checkpoint", type=Path, help="where the trained phi goes (default: the packaged one; "
                        "with --folds, phi in the run folder)")
    parser.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    return parser


def main(argv: list[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    defaults = TrainConfig()
    train_config = TrainConfig(**{k: getattr(args, k) for k in asdict(defaults) if hasattr(args, k)})
    try:
        rule = DataRule(args.rule, args.folds, args.hold_out, args.split, args.fold_seed)
    except ValueError as e:
        parser.error(str(e))
    data = lama_ckl.data_folder(args.data)
    results_root = RESULTS_ROOT
    out = args.out or results_root / "train-attention" / run_name(args.variant, rule)
    # A phi that held a fold out is for cross-fitting, never the packaged one.
    destination = args.checkpoint or (out / "phi" if rule.folds else phi.packaged_checkpoint(args.model, args.variant))
    loaded = load_model(Settings(model=args.model))
    train_and_save(loaded, train_config, rule, data, out, results_root, args.model, destination,
                   "ckl train-attention " + " ".join(argv), args.resume)
    print(f"phi written to {destination}.safetensors (+ .json); curve in {out / 'curve.json'}")
