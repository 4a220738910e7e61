"""`ckl bench phi-crossfit`: would phi reach Oracle had it been meta-trained on the TO-LEARN relations?

A diagnostic; nothing it trains is shipped or served. `ckl train-attention` keeps phi's training
pairs to invariant rows, and none of their relations occurs in the TO-LEARN pool (`ckl bench
phi-transfer`). Here the pool (every variant row the base model gets wrong, in the benchmark's own
order) is cut into two halves, alternate rows. For each half: a phi of `--variant` is trained as the
packaged one of that variant was (the training settings in its json, the same invariant pairs) plus
the pairs of the other half; then one LAMA-ckl run on the held-out half, with the whole-pool run's NF
rows, trains oracle, the packaged phi's method (taalm or taalm-exact) and the same method with this
phi (NAME-crossfit); `--methods` can add any method of the benchmark, and NAME-crossfit for any that
uses a phi of the variant (e.g. smf+ta-crossfit). Same rows, same run: what separates taalm from
taalm-crossfit is only the TO-LEARN relations' pairs in phi's training.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.lama_ckl.run import METHODS, Config, MethodSpec, memory_background, run_method
from bench.phi_transfer import measure
from service.model.loader import load_model
from service.settings import Settings
from workers import lama_ckl
from workers.attention import phi, training
from workers.provenance import RESULTS_ROOT, git_commit

SUFFIX = "-crossfit"
PACKAGED_METHOD = {"first-order": "taalm", "exact": "taalm-exact"}


def halves(pool: list[Any], fold: int) -> tuple[list[Any], list[Any]]:
    """(trained on, held out): alternate rows of the pool; fold 0 trains on the even ones."""
    return pool[fold::2], pool[1 - fold::2]


def method_spec(name: str, variant: str, phi_path: Path) -> MethodSpec:
    """A registry method, or NAME-crossfit: that method with the phi at `phi_path` (of `variant`)."""
    if not name.endswith(SUFFIX):
        return METHODS[name]
    base = METHODS[name.removesuffix(SUFFIX)]
    if base.phi_variant != variant:
        raise SystemExit(f"{name}: {name.removesuffix(SUFFIX)} does not weigh with the {variant} phi")
    return replace(base, phi_checkpoint=str(phi_path))


def train_phi(settings: Settings, variant: str, data: Path, results_root: Path, rows: list[lama_ckl.Row],
              path: Path) -> None:
    """The packaged phi's training (its settings), plus `rows`; written to `path`. Features and alignments
    are cached per uuid beside the packaged phi's (bench-results/train-attention/cache)."""
    loaded = load_model(settings)
    packaged = phi.load_checkpoint(phi.packaged_checkpoint(settings.model, variant))
    config = training.TrainConfig(**packaged.meta["train"])
    head, record = training.train(loaded, config, data, results_root / "train-attention" / f"crossfit-{path.name}",
                                  results_root, settings.model, resume=False, extra_train=rows)
    phi.save_checkpoint(path, head, {"base_model": phi.fingerprint(loaded.model), "model": settings.model,
                                     "variant": config.variant, "git_commit": git_commit(),
                                     "train": asdict(config), **record})


def run_fold(fold: int, pool: list[lama_ckl.Row], nf: list[lama_ckl.Row], background: list[str], settings: Settings,
             args: argparse.Namespace, results_root: Path) -> dict[str, Any]:
    trained_on, held_out = halves(pool, fold)
    path = args.out / f"phi-{args.variant}-fold{fold}"
    train_phi(settings, args.variant, args.data, results_root, trained_on, path)
    loaded = load_model(settings)
    phis = {"packaged": phi.TrainAttention.from_path(loaded.model,
                                                     phi.packaged_checkpoint(settings.model, args.variant)),
            "crossfit": phi.TrainAttention.from_path(loaded.model, path)}
    transfer = {name: measure(p, loaded.tokenizer, held_out, args.threshold, Config().max_tokens)
                for name, p in phis.items()}
    del loaded, phis
    config = Config(methods=args.methods, to_learn=len(held_out), nf=len(nf), epochs=args.epochs,
                    model=settings.model)
    methods = [run_method(name, config, lambda: load_model(settings), held_out, nf, background,
                          spec=method_spec(name, args.variant, path)) for name in args.methods]
    return {"fold": fold, "trained_on": [r.uuid for r in trained_on], "held_out": [r.uuid for r in held_out],
            "transfer": transfer, "methods": methods}


def markdown(folds: list[dict[str, Any]]) -> str:
    """One row per fold and method, then each fold's two phis on its held-out documents."""
    lines = ["| fold | held-out rows | method | Top Acc | Epoch | NF Acc | % of Oracle's Top Acc |",
             "|---|---|---|---|---|---|---|"]
    for f in folds:
        oracle = next((m["top_acc"] for m in f["methods"] if m["method"] == "oracle"), 0.0)
        for m in f["methods"]:
            ratio = f"{100 * m['top_acc'] / oracle:.0f}%" if oracle else ""
            lines.append(f"| {f['fold']} | {len(f['held_out'])} | {m['method']} | {m['top_acc']:.3f} | "
                         f"{m['top_epoch']} | {m['nf_acc']:.3f} | {ratio} |")
    lines += ["", "| fold | phi | share of weight on the object | most weighted token is the object's |",
              "|---|---|---|---|"]
    lines += [f"| {f['fold']} | {name} | {t['object_share']:.3f} | {t['top_is_object']:.2f} |"
              for f in folds for name, t in f["transfer"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench phi-crossfit", description=__doc__.split("\n")[0])
    parser.add_argument("--folds", default="0,1", help="which halves to hold out, comma-separated")
    parser.add_argument("--variant", choices=training.VARIANTS, default=phi.DEFAULT_VARIANT)
    parser.add_argument("--methods", help="comma-separated benchmark methods, and NAME-crossfit for those that use "
                        "phi (default: oracle, the variant's taalm method, and it with the crossfit phi)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--nf", type=int, default=128)
    parser.add_argument("--threshold", type=float, default=Settings().weight_threshold)
    parser.add_argument("--data", type=Path, default=lama_ckl.DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=RESULTS_ROOT / "phi-crossfit")
    args = parser.parse_args(argv)
    taalm = PACKAGED_METHOD[args.variant]
    args.methods = args.methods.split(",") if args.methods else ["oracle", taalm, taalm + SUFFIX]
    unknown = {m.removesuffix(SUFFIX) for m in args.methods} - set(METHODS)
    if unknown:
        raise SystemExit(f"unknown methods: {', '.join(sorted(unknown))}")
    for name in args.methods:  # refuse a NAME-crossfit of another variant before any training
        method_spec(name, args.variant, args.out)
    if not args.data.is_dir():
        raise SystemExit(f"no LAMA-ckl data in {args.data}: pass --data")

    settings = Settings()
    results_root = RESULTS_ROOT
    files = lama_ckl.data_files(args.data)
    variant, invariant = lama_ckl.read_pools(args.data)
    scores = lama_ckl.tailor_scores(load_model(settings), variant + invariant,
                                    lama_ckl.tailoring_cache(results_root, settings.model, files))
    pool, nf = lama_ckl.split(variant, invariant, scores, len(variant), args.nf, seed=0)
    background = memory_background(invariant, scores)
    args.out.mkdir(parents=True, exist_ok=True)
    folds = [run_fold(int(k), pool, nf, background, settings, args, results_root) for k in args.folds.split(",")]
    record = {"git_commit": git_commit(), "variant": args.variant, "folds": folds}
    (args.out / "results.json").write_text(json.dumps(record, indent=1))
    table = markdown(folds)
    (args.out / "results.md").write_text(table)
    print(table)
    print(f"written to {args.out}")
