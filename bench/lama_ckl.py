"""`ckl bench lama-ckl`: the Train-Attention paper's LAMA-ckl protocol on the model we serve.

1. Tailoring: score the base model on every row's `task_descriptive` probe (teacher-forced accuracy
   of the object tokens at the object's last occurrence). TO-LEARN = variant_dev rows scored 0,
   NF = invariant rows scored 1. Scores are cached per model and data file.
2. For each method: epoch -1 is the untouched model; each epoch trains once over the TO-LEARN
   evidence in batches, then scores TO-LEARN and NF probes.
3. Top Acc = best TO-LEARN accuracy over epochs, Epoch = where, NF Acc = NF accuracy there,
   Total Knowledge = Top Acc + NF Acc. Written to results.json, results.md and curves.png.
4. Where Top Acc comes from: TO-LEARN rows grouped by (relation, answer), and each method's score per
   group at its best epoch. Many rows share an answer (in the default model's pool of 261, "jazz"
   answers 37), so a method that learns a relation's common answer scores on every row that has it.

The training loop, the weighted loss and the probe scoring are the service's own (workers.methods,
service.knowledge.scoring).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import random
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import torch
from safetensors.torch import save_file
from tqdm import tqdm

from service.knowledge.probes import lama_probe
from service.knowledge.scoring import Probe, score_probes, token_nll
from service.model.loader import LoadedModel
from service.settings import Settings
from workers import contexts, weighting
from workers.attention.phi import TrainAttention, packaged_checkpoint
from workers.methods import REGISTRY
from workers.methods.base import Example
from workers.methods.memory import MemoryMethod, hubs

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "lama_ckl"
RHO1_KEEP = 0.6


@dataclass(frozen=True)
class Row:
    uuid: str
    evidence: str
    object: str
    probe: Probe
    relation: str = ""


@dataclass(frozen=True)
class MethodSpec:
    update: str  # a key of workers.methods.REGISTRY
    weighting: str  # uniform | oracle | rho1 | train_attention
    learning_rate: float
    phi_variant: str | None = None  # for train_attention: which packaged phi (meta-gradient variant)
    phi_checkpoint: str | None = None  # for train_attention: a phi outside the package instead (ckl bench phi-crossfit)


# The benchmark's registry; sparse memory adds entries here.
METHODS: dict[str, MethodSpec] = {
    "finetune": MethodSpec("adapter", "uniform", 3e-4),
    "oracle": MethodSpec("adapter", "oracle", 3e-4),
    "rho1": MethodSpec("adapter", "rho1", 3e-4),
    "full": MethodSpec("full", "uniform", 1e-5),
    "taalm": MethodSpec("adapter", "train_attention", 3e-4, phi_variant="first-order"),
    "taalm-exact": MethodSpec("adapter", "train_attention", 3e-4, phi_variant="exact"),
    "smf": MethodSpec("memory", "uniform", 10.0),
    "smf+ta": MethodSpec("memory", "train_attention", 10.0, phi_variant="first-order"),
    "smf+ta-exact": MethodSpec("memory", "train_attention", 10.0, phi_variant="exact"),
    # What the memory can learn when the weights are right (the answer's tokens): its ceiling.
    "smf+oracle": MethodSpec("memory", "oracle", 100.0),
}
BACKGROUND_DOCS = 300  # background texts for the memory's keys and slot document frequencies


@dataclass
class Config:
    methods: list[str] = field(default_factory=lambda: ["finetune", "oracle"])
    to_learn: int = 48
    nf: int = 48
    epochs: int = 4
    batch_size: int = 8
    max_tokens: int = 128
    lora_rank: int = 16
    lora_alpha: float = 32.0
    learning_rates: dict[str, float] = field(default_factory=dict)
    max_grad_norm: float = 1.0
    seed: int = 0
    offset: int = 0  # rows skipped in each pool; 0 = the reported rows
    rows_per_file: int | None = None
    model: str = "default"  # as CKL_MODEL; picks the packaged phi for train_attention


PRESETS = {
    "quick": {"to_learn": 48, "nf": 48, "epochs": 4, "methods": ["finetune", "oracle"]},
    "full": {"to_learn": 10**6, "nf": 10**6, "epochs": 8, "methods": list(METHODS)},
}


# -- data and tailoring ------------------------------------------------------------------------------
def read_rows(path: Path, limit: int | None = None) -> list[Row]:
    rows = []
    for line in path.read_text().splitlines()[:limit]:
        raw = json.loads(line)
        probe = lama_probe(raw)
        if probe is not None:
            rows.append(Row(raw["uuid"], raw["evidence"], raw["object"], probe, raw.get("relation_label", "")))
    return rows


def file_digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def data_files(folder: Path) -> list[Path]:
    """variant_dev (TO-LEARN pool) first, then the two invariant files."""
    return [folder / "variant_dev.jsonl", folder / "invariant_descriptive.jsonl", folder / "invariant_schematic.jsonl"]


def read_invariant(folder: Path, limit: int | None = None) -> list[Row]:
    """The rows of both invariant files, `limit` rows per file."""
    return [row for f in data_files(folder)[1:] for row in read_rows(f, limit)]


def read_pools(folder: Path, limit: int | None = None) -> tuple[list[Row], list[Row]]:
    """The variant_dev rows (the TO-LEARN pool's file) and the invariant rows, `limit` rows per file."""
    return read_rows(data_files(folder)[0], limit), read_invariant(folder, limit)


def tailoring_cache(results_root: Path, model: str, files: list[Path]) -> Path:
    return results_root / "cache" / f"{model.replace('/', '_')}-{file_digest(files)}.json"


def tailor_scores(loaded: LoadedModel, rows: list[Row], cache: Path) -> dict[str, float]:
    """Base-model score of every row's probe, cached in `cache` (one file per model and data)."""
    known = json.loads(cache.read_text()) if cache.exists() else {}
    missing = [r for r in rows if r.uuid not in known]
    if missing:
        scores = score_probes(loaded.model, loaded.tokenizer, [r.probe for r in missing])
        known.update({r.uuid: s for r, s in zip(missing, scores)})
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(known))
    return {r.uuid: known[r.uuid] for r in rows}


def split(variant: list[Row], invariant: list[Row], scores: dict[str, float], n_learn: int, n_nf: int,
          seed: int, offset: int = 0) -> tuple[list[Row], list[Row]]:
    """TO-LEARN: variant rows the model gets wrong; NF: invariant rows it gets right. Deterministic in seed.
    `offset` skips that many rows of each shuffled pool: rows for tuning, disjoint from those reported at 0."""
    learn = sorted((r for r in variant if scores[r.uuid] == 0.0), key=lambda r: r.uuid)
    keep = sorted((r for r in invariant if scores[r.uuid] == 1.0), key=lambda r: r.uuid)
    rng = random.Random(seed)
    rng.shuffle(learn)
    rng.shuffle(keep)
    return once(learn)[offset:offset + n_learn], once(keep)[offset:offset + n_nf]


def once(rows: list[Row]) -> list[Row]:
    """The first row of each uuid, in order: the two invariant files share 64 identical rows."""
    seen: set[str] = set()
    return [r for r in rows if not (r.uuid in seen or seen.add(r.uuid))]


# -- training --------------------------------------------------------------------------------------
def examples_for(rows: list[Row], loaded: LoadedModel, model: torch.nn.Module, max_tokens: int,
                 spec: MethodSpec, model_name: str = "default", sentences: bool = False) -> list[Example]:
    """Each row's evidence as one window, weighted uniformly, on the object's occurrences (oracle) or by phi
    (train_attention, with the service's threshold). rho1 starts uniform; its weights are chosen again
    before every epoch (see rho1_reweigh). With `sentences` (as the service does for the memory method),
    each later sentence of the evidence is also an example of its own.
    """
    phi = None
    if spec.weighting == "train_attention":
        phi_path = Path(spec.phi_checkpoint) if spec.phi_checkpoint else packaged_checkpoint(model_name, spec.phi_variant)
        phi = TrainAttention.from_path(model, phi_path)
    threshold = Settings().weight_threshold
    examples = []
    for row in rows:
        enc = loaded.tokenizer(row.evidence, return_offsets_mapping=True, truncation=True, max_length=max_tokens)
        ids = enc["input_ids"]
        if spec.weighting == "oracle":
            weights = weighting.oracle(enc["offset_mapping"], row.evidence, [row.object])
        elif phi is not None:
            weights = weighting.thresholded(phi.weights(ids), threshold)
        else:
            weights = weighting.uniform(len(ids))
        if any(weights):
            examples.append(Example(ids, weights))
        if sentences:
            examples += contexts.sentence_examples(ids, weights, enc["offset_mapping"], row.evidence,
                                                   loaded.tokenizer.bos_token_id, max_tokens)
    return examples


def rho1_reweigh(model: torch.nn.Module, loaded: LoadedModel, examples: list[Example],
                 reference: list[list[float]]) -> list[Example]:
    """Rho-1, per epoch: keep the 60% of each document's tokens whose loss most exceeds the untouched model's."""
    current = token_nll(model, [e.input_ids for e in examples], loaded.tokenizer.pad_token_id or 0)
    return [Example(e.input_ids, weighting.excess_loss_top(c, r, RHO1_KEEP))
            for e, c, r in zip(examples, current, reference)]


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def prepare_memory(method: MemoryMethod, loaded: LoadedModel, background: list[str], max_tokens: int) -> dict:
    """Keys from background text, then the slots' statistics over it; returns what it found."""
    docs = [loaded.tokenizer(t, truncation=True, max_length=max_tokens)["input_ids"] for t in background]
    method.fit_background(docs)
    bg = method.background
    return {"background_docs": len(docs), "slots_read_by_background": int((bg.df > 0).sum()),
            "slots": int(bg.df.numel()), "hub_slots": int(hubs(bg, method.max_read_share).sum())}


def memory_update_costs(method: MemoryMethod) -> dict[str, Any]:
    """Rows the training changed, the sparse delta's size on disk, and the time to swap it in."""
    delta = method.delta()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "delta.safetensors"
        save_file(delta, str(path))
        size = path.stat().st_size
    started = time.perf_counter()
    method.load(delta)
    return {"rows_changed": int(delta["rows"].numel()), "delta_bytes": size,
            "swap_in_s": round(time.perf_counter() - started, 4)}


def run_method(name: str, config: Config, load: Callable[[], LoadedModel], to_learn: list[Row],
               nf: list[Row], background: list[str] | None = None, spec: MethodSpec | None = None) -> dict[str, Any]:
    spec = spec or METHODS[name]
    lr = config.learning_rates.get(name, spec.learning_rate)
    loaded = load()
    settings = Settings(lora_rank=config.lora_rank, lora_alpha=config.lora_alpha, optimizer="adamw",
                        learning_rate=lr, check_every=10**9, max_grad_norm=config.max_grad_norm)
    method = REGISTRY[spec.update](loaded.model, loaded.tokenizer, settings)
    extra: dict[str, Any] = {}
    if isinstance(method, MemoryMethod):
        extra["memory"] = prepare_memory(method, loaded, background or [], config.max_tokens)
    method.load(None)
    learn_probes, nf_probes = [r.probe for r in to_learn], [r.probe for r in nf]
    examples = examples_for(to_learn, loaded, method.model, config.max_tokens, spec, config.model,
                            method.sentence_contexts)
    reference = token_nll(method.model, [e.input_ids for e in examples], loaded.tokenizer.pad_token_id or 0) \
        if spec.weighting == "rho1" else []
    optimizer = method.optimizer(lr)
    rng = random.Random(config.seed)
    peak = rss_mb()

    def score() -> tuple[float, float, list[float]]:
        learn = score_probes(method.model, loaded.tokenizer, learn_probes)
        keep = score_probes(method.model, loaded.tokenizer, nf_probes)
        return sum(learn) / len(learn), sum(keep) / len(keep), [round(s, 4) for s in learn]

    learn_acc, nf_acc, learn_scores = score()
    epochs = [{"epoch": -1, "to_learn_acc": learn_acc, "nf_acc": nf_acc, "train_s": 0.0,
               "to_learn_scores": learn_scores}]
    steps = math.ceil(len(examples) / config.batch_size)
    for epoch in range(config.epochs):
        if reference:
            examples = rho1_reweigh(method.model, loaded, examples, reference)
        order = examples[:]
        rng.shuffle(order)
        with tqdm(total=steps, desc=f"{name} epoch {epoch}", leave=False) as bar:
            def progress(step: int, total: int) -> None:
                nonlocal peak
                peak = max(peak, rss_mb())
                bar.update(1)
            report = method.train(order, steps, optimizer=optimizer, batch_size=config.batch_size, progress=progress)
        learn_acc, nf_acc, learn_scores = score()
        epochs.append({"epoch": epoch, "to_learn_acc": learn_acc, "nf_acc": nf_acc,
                       "train_s": round(report.seconds, 2), "mean_loss": sum(report.losses) / len(report.losses),
                       "to_learn_scores": learn_scores})
        print(f"{name} epoch {epoch}: TO-LEARN {learn_acc:.3f}  NF {nf_acc:.3f}  {report.seconds:.1f} s", flush=True)
    if isinstance(method, MemoryMethod):
        extra["update"] = memory_update_costs(method)
    return {"method": name, "spec": asdict(spec), "learning_rate": lr, "epochs": epochs, "peak_rss_mb": round(peak),
            **summarize(epochs), **extra}


def summarize(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """Top Acc over trained epochs (first best wins), its epoch, NF Acc there, Total Knowledge, s/epoch."""
    trained = [e for e in epochs if e["epoch"] >= 0]
    best = max(trained, key=lambda e: (e["to_learn_acc"], -e["epoch"]))
    return {"top_acc": best["to_learn_acc"], "top_epoch": best["epoch"], "nf_acc": best["nf_acc"],
            "total_knowledge": best["to_learn_acc"] + best["nf_acc"],
            "s_per_epoch": sum(e["train_s"] for e in trained) / len(trained)}


def answer_groups(answers: list[tuple[str, str]]) -> dict[tuple[str, str], list[int]]:
    """The TO-LEARN rows' indices per (relation, answer), largest group first (ties in first-seen order)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, answer in enumerate(answers):
        groups.setdefault(answer, []).append(i)
    return dict(sorted(groups.items(), key=lambda item: -len(item[1])))


def learned_by_group(groups: dict[tuple[str, str], list[int]], scores: list[float]) -> dict[tuple[str, str], float]:
    """Each group's summed TO-LEARN score (rows learned, counting a multi-token answer's share)."""
    return {answer: sum(scores[i] for i in rows) for answer, rows in groups.items()}


# -- outputs ---------------------------------------------------------------------------------------
def best_scores(method: dict[str, Any]) -> list[float]:
    return next(e["to_learn_scores"] for e in method["epochs"] if e["epoch"] == method["top_epoch"])


def groups_markdown(results: dict[str, Any], shown: int = 10) -> list[str]:
    """Rows learned per (relation, answer) group at each method's best epoch: the largest groups, then the rest."""
    groups = answer_groups([tuple(a) for a in results["tailoring"]["to_learn_answers"]])
    methods = results["methods"]
    learned = [learned_by_group(groups, best_scores(m)) for m in methods]
    top = list(groups)[:shown]
    lines = ["", "| Answer (relation) | rows | " + " | ".join(m["method"] for m in methods) + " |",
             "|---|---|" + "---|" * len(methods)]
    for answer in top:
        lines.append(f"| {answer[1]} ({answer[0]}) | {len(groups[answer])} | "
                     + " | ".join(f"{by[answer]:.0f}" for by in learned) + " |")
    rest = [a for a in groups if a not in top]
    lines.append(f"| {len(rest)} other answers | {sum(len(groups[a]) for a in rest)} | "
                 + " | ".join(f"{sum(by[a] for a in rest):.0f}" for by in learned) + " |")
    lines.append(f"| answers with a row learned | {len(groups)} | "
                 + " | ".join(str(sum(by[a] > 0 for a in groups)) for by in learned) + " |")
    return lines


def markdown(results: dict[str, Any]) -> str:
    lines = ["| Method | Top Acc | Epoch | NF Acc | Total Knowledge | s/epoch | peak RSS (MB) |",
             "|---|---|---|---|---|---|---|"]
    for r in results["methods"]:
        lines.append(f"| {r['method']} | {r['top_acc']:.3f} | {r['top_epoch']} | {r['nf_acc']:.3f} | "
                     f"{r['total_knowledge']:.3f} | {r['s_per_epoch']:.1f} | {r['peak_rss_mb']} |")
    memory = [r for r in results["methods"] if "update" in r]
    if memory:
        lines += ["", "| Method | rows changed | delta on disk (KB) | swap-in (ms) | background slots read | hub slots |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['method']} | {r['update']['rows_changed']} | {r['update']['delta_bytes'] / 1024:.0f} | "
                  f"{r['update']['swap_in_s'] * 1000:.1f} | {r['memory']['slots_read_by_background']} of "
                  f"{r['memory']['slots']} | {r['memory']['hub_slots']} |" for r in memory]
    lines += groups_markdown(results)
    t = results["tailoring"]
    lines += ["", f"TO-LEARN {t['to_learn']} rows, NF {t['nf']} rows; model {results['model']}; "
                  f"commit {results['git_commit']}; epoch -1 is the untouched model."]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    for r in results["methods"]:
        xs = [e["epoch"] for e in r["epochs"]]
        left.plot(xs, [e["to_learn_acc"] for e in r["epochs"]], marker="o", label=r["method"])
        right.plot(xs, [e["nf_acc"] for e in r["epochs"]], marker="o", label=r["method"])
    left.set(title="TO-LEARN accuracy (learning)", xlabel="epoch (-1 = untouched)", ylabel="accuracy", ylim=(0, 1))
    right.set(title="NOT-TO-FORGET accuracy (retention)", xlabel="epoch (-1 = untouched)", ylim=(0, 1.02))
    left.legend()
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "results.md").write_text(markdown(results))
    plot(results, out / "curves.png")


def git_commit() -> str:
    """HEAD, with "+dirty" when the working tree has uncommitted changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    try:
        return git("rev-parse", "HEAD") + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def memory_background(invariant: list[Row], scores: dict[str, float]) -> list[str]:
    """The memory's background text: evidence of invariant rows the model gets wrong (in neither pool)."""
    return [r.evidence for r in sorted(invariant, key=lambda r: r.uuid) if scores[r.uuid] == 0.0][:BACKGROUND_DOCS]


def run_benchmark(config: Config, load: Callable[[], LoadedModel], variant: list[Row], invariant: list[Row],
                  cache: Path, model_name: str) -> dict[str, Any]:
    base = load()
    scores = tailor_scores(base, variant + invariant, cache)
    del base
    to_learn, nf = split(variant, invariant, scores, config.to_learn, config.nf, config.seed,
                      config.offset)
    if not to_learn or not nf:
        raise SystemExit("tailoring left an empty TO-LEARN or NF pool: use more rows")
    background = memory_background(invariant, scores)
    methods = [run_method(name, config, load, to_learn, nf, background) for name in config.methods]
    return {
        "model": model_name,
        "config": asdict(config),
        "git_commit": git_commit(),
        "machine": {"platform": platform.platform(), "cpus": psutil.cpu_count(), "torch": torch.__version__,
                    "threads": torch.get_num_threads(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1)},
        "tailoring": {"variant_rows": len(variant), "invariant_rows": len(invariant),
                      "variant_scored_0": sum(scores[r.uuid] == 0.0 for r in variant),
                      "invariant_scored_1": sum(scores[r.uuid] == 1.0 for r in invariant),
                      "to_learn": len(to_learn), "nf": len(nf),
                      "to_learn_uuids": [r.uuid for r in to_learn], "nf_uuids": [r.uuid for r in nf],
                      "to_learn_answers": [[r.relation, r.object] for r in to_learn]},
        "methods": methods,
    }


def parse_lrs(values: list[str]) -> dict[str, float]:
    pairs = [v.split("=", 1) for v in values]
    return {name: float(lr) for name, lr in pairs}


def main(argv: list[str]) -> None:
    from service.model.loader import load_model

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
    parser.add_argument("--offset", type=int, help="skip the first N rows of each pool: tune here, report at 0")
    parser.add_argument("--max-grad-norm", type=float, help="gradient clipping (0: none; default 1.0)")
    parser.add_argument("--rows-per-file", type=int, help="read only the first N rows of each data file")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with the LAMA-ckl jsonl files")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "lama-ckl")
    args = parser.parse_args(argv)

    values: dict[str, Any] = {}
    for preset in ("quick", "full"):
        if getattr(args, preset):
            values.update(PRESETS[preset])
    values.update({k: v for k, v in {"to_learn": args.to_learn, "nf": args.nf, "epochs": args.epochs,
                                     "batch_size": args.batch_size, "max_tokens": args.max_tokens, "seed": args.seed,
                                     "offset": args.offset,
                                     "max_grad_norm": args.max_grad_norm,
                                     "rows_per_file": args.rows_per_file}.items() if v is not None})
    if args.methods:
        values["methods"] = args.methods.split(",")
    unknown = set(values.get("methods", [])) - set(METHODS)
    if unknown:
        raise SystemExit(f"unknown methods: {', '.join(sorted(unknown))}")
    config = Config(**values, learning_rates=parse_lrs(args.lr), model=args.model)

    if not args.data.is_dir():
        raise SystemExit(f"no LAMA-ckl data in {args.data}: pass --data (see README for where it comes from)")
    variant, invariant = read_pools(args.data, config.rows_per_file)
    settings = Settings(model=args.model)
    cache = tailoring_cache(args.out.parent, args.model, data_files(args.data))
    results = run_benchmark(config, lambda: load_model(settings), variant, invariant, cache, args.model)
    write_outputs(results, args.out)
    print(markdown(results))
    print(f"written to {args.out}")
