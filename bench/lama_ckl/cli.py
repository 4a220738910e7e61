"""`ckl bench lama-ckl`: the Train-Attention paper's LAMA-ckl protocol on the model we serve."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.lama_ckl.phis import CrossFit, as_is
from bench.lama_ckl.report import markdown, write_outputs
from bench.lama_ckl.run import METHODS, Config, run_benchmark
from core.settings import Settings
from research.lama_ckl import add_data_argument, data_files, data_folder, read_pools, tailoring_cache
from research.provenance import RESULTS_ROOT
from research.train_attention.folds import SPLITS

PRESETS = {
    "quick": {"to_learn": 48, "nf": 48, "epochs": 4, "methods": ["finetune", "oracle"]},
    "full": {"to_learn": 10**6, "nf": 10**6, "epochs": 8, "methods": list(METHODS)},
}


def parse_lrs(values: list[str]) -> dict[str, float]:
    pairs = [v.split("=", 1) for v in values]
    return {name: float(lr) for name, lr in pairs}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ckl bench lama-ckl", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="48 TO-LEARN, 48 NF, 4 epochs, finetune + oracle")
    parser.add_argument("--full", action="store_true", help="all tailored rows, 8 epochs, all methods (hours)")
    parser.add_argument("--model", default="default", help="base model (as CKL_MODEL)")
    parser.add_argument("--methods", help=f"comma-separated, from {', '.join(METHODS)}")
    parser.add_argument("--to-learn", type=int)
    parser.add_argument("--nf", type=int)
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument("--lr", action="append", default=[], help="per method, e.g. --lr oracle=1e-4")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--order-seed", type=int, help="seed of the training order only: the same rows, "
                        "batched otherwise (default: --seed)")
    parser.add_argument("--offset", type=int, help="skip the first N rows of each pool: tune here, report at 0")
    parser.add_argument("--max-grad-norm", type=float, help="gradient clipping (0: none; default 1.0)")
    parser.add_argument("--rows-per-file", type=int, help="read only the first N rows of each data file")
    add_data_argument(parser)
    parser.add_argument("--crossfit", type=int, metavar="K", help="a phi meta-trained on evaluated TO-LEARN rows is "
                        "replaced by K phis, one per fold of variant_dev, each trained on the other folds and "
                        "weighing only its fold's rows (cached in bench-results/crossfit-phis); without it such a "
                        "phi is refused")
    parser.add_argument("--split", choices=SPLITS, help="with --crossfit: folds by uuid (default) or by (relation, "
                        "answer) group")
    parser.add_argument("--fold-seed", type=int, help="with --crossfit: the folds' seed (default 0)")
    parser.add_argument("--out", type=Path, default=RESULTS_ROOT / "lama-ckl")
    return parser


def config_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Config:
    """The run's Config: a preset, then the flags given; the flags that go together checked."""
    values: dict[str, Any] = {}
    for preset in ("quick", "full"):
        if getattr(args, preset):
            values.update(PRESETS[preset])
    values.update({k: v for k, v in {"to_learn": args.to_learn, "nf": args.nf, "epochs": args.epochs,
                                     "batch_size": args.batch_size, "max_tokens": args.max_tokens, "seed": args.seed,
                                     "order_seed": args.order_seed,
                                     "offset": args.offset,
                                     "max_grad_norm": args.max_grad_norm,
                                     "rows_per_file": args.rows_per_file, "crossfit": args.crossfit,
                                     "crossfit_split": args.split, "fold_seed": args.fold_seed}.items()
                   if v is not None})
    if args.crossfit is not None and args.crossfit < 2:
        parser.error("--crossfit needs at least 2 folds")
    if (args.split is not None or args.fold_seed is not None) and not args.crossfit:
        parser.error("--split and --fold-seed go with --crossfit")
    if args.methods:
        values["methods"] = args.methods.split(",")
    unknown = set(values.get("methods", [])) - set(METHODS)
    if unknown:
        raise SystemExit(f"unknown methods: {', '.join(sorted(unknown))}")
    return Config(**values, learning_rates=parse_lrs(args.lr), model=args.model)


def main(argv: list[str]) -> None:
    from core.model.loader import load_model

    parser = build_parser()
    args = parser.parse_args(argv)
    config = config_from(args, parser)
    data = data_folder(args.data)
    variant, invariant = read_pools(data, config.rows_per_file)
    settings = Settings(model=args.model)
    cache = tailoring_cache(args.out.parent, args.model, data_files(data))
    assign = CrossFit(config.crossfit, config.crossfit_split, config.fold_seed, data, args.out.parent,
                      lambda: load_model(settings), args.model) if config.crossfit else as_is
    results = run_benchmark(config, lambda: load_model(settings), variant, invariant, cache, args.model, assign)
    write_outputs(results, args.out)
    print(markdown(results))
    print(f"written to {args.out}")
