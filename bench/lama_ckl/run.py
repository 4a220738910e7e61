"""The LAMA-ckl run: the methods compared, each trained epoch by epoch on TO-LEARN and scored on both pools."""
from __future__ import annotations

import math
import platform
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import torch
from safetensors.torch import save_file
from tqdm import tqdm

from bench.lama_ckl import phis, replay, rho1
from bench.lama_ckl.full import FullMethod
from bench.lama_ckl.report import summarize
from core.model.loader import LoadedModel
from core.scoring import score_probes
from core.settings import Settings
from core.training import Example, UpdateMethod
from methods.adapter.training import AdapterMethod
from methods.memory.training import MemoryMethod, hubs
from research.lama_ckl import Row, split, tailor_scores
from research.provenance import git_commit
from workers import examples
from workers.train_attention.phi import TrainAttention, packaged_checkpoint

# The trainers a method can use: the service's two, and full fine-tuning, which it does not offer.
TRAINERS: dict[str, type[UpdateMethod]] = {"adapter": AdapterMethod, "memory": MemoryMethod, "full": FullMethod}


@dataclass(frozen=True)
class MethodSpec:
    update: str  # a key of TRAINERS
    weighting: str  # uniform | oracle | rho1 | train_attention
    learning_rate: float
    phi_variant: str | None = None  # for train_attention: which packaged phi (meta-gradient variant)
    phi_checkpoint: str | None = None  # for train_attention: a phi outside the package instead
    threshold: float | None = None  # for train_attention: phi's relative cut; None: the service's (CKL_TRAINING_WEIGHT_THRESHOLD)
    replay: bool = False  # Mix-review: the base model's own text beside each batch (replay.py)
    min_weight: float = 0.0  # for train_attention: also 0 below this absolute weight (a row left with none: no window)


ANSWER_CUT = 0.5  # the relative threshold of the methods that weigh with the answer phi

# The benchmark's registry; sparse memory adds entries here.
METHODS: dict[str, MethodSpec] = {
    "finetune": MethodSpec("adapter", "uniform", 3e-4),
    "oracle": MethodSpec("adapter", "oracle", 3e-4),
    "rho1": MethodSpec("adapter", "rho1", 3e-4),
    "full": MethodSpec("full", "uniform", 1e-5),
    # taalm: the phi that teaches LAMA-ckl best; the service weighs with first-order (docs/decisions.md: phi learns
    # where the answer is). The answer phi's weight is a probability that the token is an answer's, so it keeps the
    # tokens at least half as likely as the document's likeliest (docs/decisions.md: The answer phi's own cut).
    "taalm": MethodSpec("adapter", "train_attention", 3e-4, phi_variant="answer", threshold=ANSWER_CUT),
    # Mix-review (the paper's best Total Knowledge adds it to TAALM), with either weighting.
    "taalm+mix": MethodSpec("adapter", "train_attention", 3e-4, phi_variant="answer", threshold=ANSWER_CUT,
                            replay=True),
    "oracle+mix": MethodSpec("adapter", "oracle", 3e-4, replay=True),
    # Only the tokens the answer phi finds more likely than not to be the answer: a row where it finds none is
    # not trained on (docs/decisions.md: The training order decides the large groups).
    "taalm-likely": MethodSpec("adapter", "train_attention", 3e-4, phi_variant="answer", threshold=ANSWER_CUT,
                               min_weight=0.5),
    "taalm-first-order": MethodSpec("adapter", "train_attention", 3e-4, phi_variant="first-order"),
    "taalm-exact": MethodSpec("adapter", "train_attention", 3e-4, phi_variant="exact"),
    # The paper's protocol (phi from invariant rows only), reported beside a phi of the new data rule.
    "taalm-paper": MethodSpec("adapter", "train_attention", 3e-4, phi_variant="answer-paper", threshold=ANSWER_CUT),
    "taalm-first-order-paper": MethodSpec("adapter", "train_attention", 3e-4, phi_variant="first-order-paper"),
    "smf": MethodSpec("memory", "uniform", 10.0),
    # phi's weights at the learning rate of the memory's ceiling below, so that they differ only in weights.
    "smf+ta": MethodSpec("memory", "train_attention", 100.0, phi_variant="answer", threshold=ANSWER_CUT),
    "smf+ta-exact": MethodSpec("memory", "train_attention", 100.0, phi_variant="exact"),
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
    order_seed: int | None = None  # the training order's seed alone (the rows stay those of `seed`); None: `seed`
    offset: int = 0  # rows skipped in each pool; 0 = the reported rows
    rows_per_file: int | None = None
    model: str = "default"  # as CKL_MODEL; picks the packaged phi for train_attention
    crossfit: int = 0  # folds of variant_dev for phis that saw evaluated rows (phis.py); 0: refuse such a phi
    crossfit_split: str = "uuid"
    fold_seed: int = 0


def phi_path(spec: MethodSpec, model_name: str) -> Path:
    """The phi a train_attention method weighs with, unless cross-fitted."""
    return Path(spec.phi_checkpoint) if spec.phi_checkpoint else packaged_checkpoint(model_name, spec.phi_variant)


def examples_for(rows: list[Row], loaded: LoadedModel, model: torch.nn.Module, max_tokens: int,
                 spec: MethodSpec, model_name: str = "default", sentences: bool = False,
                 assignment: phis.Assignment | None = None) -> list[Example]:
    """Each row's evidence, cut to `max_tokens` (one window), weighted as the service weighs a document
    (workers/examples.py): uniformly, on the object's occurrences (oracle) or by phi (train_attention, cut at
    the method's threshold, else the service's). No fallback: a row whose weights are all 0 gives no window. rho1 starts
    uniform; its weights are chosen again before every epoch (rho1.py). With `sentences` (as the service
    does for the memory method), each later sentence of the evidence is also an example of its own.
    `assignment` (train_attention): which phi weighs which row (phis.py); by default the method's own phi.
    """
    weigh: dict[str, TrainAttention] = {}
    if spec.weighting == "train_attention":
        assignment = assignment or phis.as_is(phi_path(spec, model_name), rows)
        loaded_phis = {path: TrainAttention.from_path(model, path) for path in set(assignment.values())}
        weigh = {row.uuid: loaded_phis[assignment[row.uuid]] for row in rows}
    how = "uniform" if spec.weighting == "rho1" else spec.weighting
    threshold = Settings().training.weight_threshold if spec.threshold is None else spec.threshold
    out = []
    for row in rows:
        doc = examples.encode(loaded.tokenizer, row.evidence, max_tokens)
        phi = weigh.get(row.uuid)
        weights = examples.token_weights(doc, how, [row.object], phi.weights if phi else None, threshold)
        weights = [w if w >= spec.min_weight else 0.0 for w in weights]
        out += examples.document_examples(doc, weights, max_tokens, loaded.tokenizer.bos_token_id, sentences)
    return out


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


def new_trainer(spec: MethodSpec, config: Config, loaded: LoadedModel, lr: float,
                background: list[str] | None) -> tuple[UpdateMethod, dict[str, Any]]:
    """The method's trainer on a fresh model, at version 0 (the memory first fitted to `background`), and what
    preparing it found."""
    settings = Settings(training={"check_every": 10**9, "max_grad_norm": config.max_grad_norm}, method_settings={
        "adapter": {"rank": config.lora_rank, "alpha": config.lora_alpha, "optimizer": "adamw", "learning_rate": lr}})
    method = TRAINERS[spec.update](loaded.model, loaded.tokenizer, settings)
    extra: dict[str, Any] = {}
    if isinstance(method, MemoryMethod):
        extra["memory"] = prepare_memory(method, loaded, background or [], config.max_tokens)
    method.load(None)
    return method, extra


def pool_scores(method: UpdateMethod, tokenizer, to_learn: list[Row], nf: list[Row]) -> dict[str, Any]:
    """Both pools' accuracy and each row's score, on the model as trained so far."""
    learn = score_probes(method.model, tokenizer, [r.probe for r in to_learn])
    keep = score_probes(method.model, tokenizer, [r.probe for r in nf])
    return {"to_learn_acc": sum(learn) / len(learn), "nf_acc": sum(keep) / len(keep),
            "to_learn_scores": [round(s, 4) for s in learn], "nf_scores": [round(s, 4) for s in keep]}


def train_epochs(name: str, spec: MethodSpec, config: Config, method: UpdateMethod, loaded: LoadedModel, lr: float,
                 train_on: list[Example], to_learn: list[Row], nf: list[Row],
                 replayed: Sequence[Example]) -> tuple[list[dict[str, Any]], float]:
    """Epoch -1 (untouched), then `config.epochs` passes over `train_on`, both pools scored after each; and the
    peak resident memory in MB."""
    pad_id = loaded.tokenizer.pad_token_id or 0
    reference = rho1.token_nll(method.model, [e.input_ids for e in train_on], pad_id) \
        if spec.weighting == "rho1" else []
    optimizer = method.optimizer(lr)
    rng = random.Random(config.seed if config.order_seed is None else config.order_seed)
    peak = rss_mb()
    epochs = [{"epoch": -1, **pool_scores(method, loaded.tokenizer, to_learn, nf), "train_s": 0.0}]
    steps = math.ceil(len(train_on) / config.batch_size)
    per_batch = replay.PER_BATCH if spec.replay else 0
    replay_at = 0
    for epoch in range(config.epochs):
        if reference:
            train_on = rho1.reweigh(method.model, pad_id, train_on, reference)
        order = train_on[:]
        rng.shuffle(order)
        if per_batch:
            order, replay_at = replay.interleave(order, list(replayed), config.batch_size, per_batch, replay_at)
        with tqdm(total=steps, desc=f"{name} epoch {epoch}", leave=False) as bar:
            def progress(step: int, total: int) -> None:
                nonlocal peak
                peak = max(peak, rss_mb())
                bar.update(1)
            report = method.train(order, steps, optimizer=optimizer, batch_size=config.batch_size + per_batch,
                                  progress=progress)
        scores = pool_scores(method, loaded.tokenizer, to_learn, nf)
        epochs.append({"epoch": epoch, **scores, "train_s": round(report.seconds, 2),
                       "mean_loss": sum(report.losses) / len(report.losses)})
        print(f"{name} epoch {epoch}: TO-LEARN {scores['to_learn_acc']:.3f}  NF {scores['nf_acc']:.3f}  "
              f"{report.seconds:.1f} s", flush=True)
    return epochs, peak


def run_method(name: str, config: Config, load: Callable[[], LoadedModel], to_learn: list[Row],
               nf: list[Row], background: list[str] | None = None, spec: MethodSpec | None = None,
               assignment: phis.Assignment | None = None, replayed: Sequence[Example] = ()) -> dict[str, Any]:
    spec = spec or METHODS[name]
    if spec.weighting == "train_attention":  # every caller's phis pass the guard (run_benchmark's before any trains)
        assignment = assignment or phis.as_is(phi_path(spec, config.model), to_learn)
        phis.check_unseen(name, assignment)
    per_batch = replay.PER_BATCH if spec.replay else 0
    if per_batch and not replayed:
        raise ValueError(f"{name} replays the base model's text: pass `replayed`")
    lr = config.learning_rates.get(name, spec.learning_rate)
    loaded = load()
    method, extra = new_trainer(spec, config, loaded, lr, background)
    train_on = examples_for(to_learn, loaded, method.model, config.max_tokens, spec, config.model,
                            method.sentence_contexts, assignment)
    epochs, peak = train_epochs(name, spec, config, method, loaded, lr, train_on, to_learn, nf, replayed)
    if isinstance(method, MemoryMethod):
        extra["update"] = memory_update_costs(method)
    if assignment:
        extra["phis"] = phis.summary(assignment)
    if per_batch:
        extra["replay"] = {"windows": len(replayed), "per_batch": per_batch, "tokens": replay.LENGTH,
                           "top_p": replay.TOP_P, "seed": config.seed}
    return {"method": name, "spec": asdict(spec), "learning_rate": lr, "epochs": epochs, "peak_rss_mb": round(peak),
            **summarize(epochs), **extra}


def memory_background(invariant: list[Row], scores: dict[str, float]) -> list[str]:
    """The memory's background text: evidence of invariant rows the model gets wrong (in neither pool)."""
    return [r.evidence for r in sorted(invariant, key=lambda r: r.uuid) if scores[r.uuid] == 0.0][:BACKGROUND_DOCS]


def run_benchmark(config: Config, load: Callable[[], LoadedModel], variant: list[Row], invariant: list[Row],
                  cache: Path, model_name: str, assign: phis.Assign = phis.as_is) -> dict[str, Any]:
    """`assign`: which phi weighs which TO-LEARN row (phis.py); every assignment passes the guard before any
    method trains."""
    base = load()
    scores = tailor_scores(base, variant + invariant, cache)
    replayed = replay.examples(replay.cached(base, cache.parent / replay.cache_name(model_name, config.seed),
                                             config.seed)) if any(METHODS[n].replay for n in config.methods) else []
    del base
    to_learn, nf = split(variant, invariant, scores, config.to_learn, config.nf, config.seed,
                         config.offset)
    if not to_learn or not nf:
        raise SystemExit("tailoring left an empty TO-LEARN or NF pool: use more rows")
    background = memory_background(invariant, scores)
    assignments = {name: assign(phi_path(METHODS[name], model_name), to_learn) for name in config.methods
                   if METHODS[name].weighting == "train_attention"}
    for name, assignment in assignments.items():
        phis.check_unseen(name, assignment)
    methods = [run_method(name, config, load, to_learn, nf, background, assignment=assignments.get(name),
                          replayed=replayed) for name in config.methods]
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
