"""`ckl train-attention`: meta-train phi on (evidence, task) pairs of LAMA-ckl.

Data (`--rule`): always the invariant rows (invariant_descriptive + invariant_schematic) that the
base model gets wrong (tailoring score 0, the benchmark's own cached scores), never the invariant
rows it gets right (the NOT-TO-FORGET pool). `paper` (the default, the paper's protocol) stops there;
`with-variant` adds the rows of variant_dev (the TO-LEARN pool's file): all of them (the packaged
phi), or all but one of `--folds` folds (`--hold-out`, `--split uuid|group`, `--fold-seed`:
workers/attention/folds.py), so that LAMA-ckl can weigh each TO-LEARN row with a phi that never saw
it. One pair per uuid (the two invariant files share rows); the invariant pairs are sorted by uuid
and shuffled with the seed; the first `--val` of them are held out for validation, the rest and the
variant pairs train. The checkpoint's json records the data files' sha256, the rule, the uuids
trained on and validated on, and for `with-variant` the split, k, the held-out fold and its uuids.
With `--balance`, each training pair counts 1 / (training pairs with the same relation and answer): one
(relation, answer) can make up a large share of the pairs, the same lesson over and over
(docs/decisions.md: Count learning per (relation, answer)).

Per phi step, over a batch of pairs: weigh the document with phi and move phi towards what it learns
(`--variant`, workers/attention/meta.py): `answer`, the task's answer tokens in the document;
`first-order`, each token's usefulness; `exact`, the meta-gradient of the task's loss after one SGD
step of a fresh adapter (LoRA on the frozen base model) on the weighted loss. The trunk's
features (and for first-order the alignments) are computed once per uuid and cached beside --out, so
an interrupted run resumes (`--resume`) from its last checkpoint without redoing them, and phis of
other folds reuse them.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from service.knowledge.scoring import encode_probe
from service.model.loader import LoadedModel, load_model
from service.settings import Settings
from workers import lama_ckl, weighting
from workers.attention import folds, meta, phi
from workers.methods.adapter import AdapterMethod
from workers.provenance import RESULTS_ROOT, git_commit

VARIANTS = ("answer", "first-order", "exact")
RULES = ("paper", "with-variant")


@dataclass
class TrainConfig:
    variant: str = "answer"  # VARIANTS: what phi learns (workers/attention/meta.py)
    head: str = "attention"  # phi.HEADS
    trunk_layers: int = 9  # hidden states phi reads, evenly spaced up the trunk
    steps: int = 400
    batch: int = 16
    lr: float = 1e-3  # phi's AdamW
    inner_lr: float = 0.03  # the adapter's SGD step (both variants, and validation)
    lora_rank: int = 16
    lora_alpha: float = 32.0
    max_tokens: int = 128
    val: int = 48
    val_outer: int = 16  # validation pairs that also get the (costly) outer loss after one step
    validate_every: int = 50
    checkpoint_every: int = 25
    seed: int = 0
    balance: bool = False  # weigh pairs by 1 / (pairs sharing their relation and answer)


@dataclass(frozen=True)
class DataRule:
    """Which variant_dev rows phi meta-trains on besides the invariant rows the base model gets wrong."""
    rule: str = "paper"  # paper: none (the paper's protocol); with-variant: all, or all but fold `hold_out`
    folds: int = 0  # 0: no fold held out
    hold_out: int = 0
    split: str = "uuid"
    fold_seed: int = 0

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown rule {self.rule!r}: one of {', '.join(RULES)}")
        if self.folds and self.rule != "with-variant":
            raise ValueError("folds of variant_dev need the with-variant rule")
        if self.folds and not 0 <= self.hold_out < self.folds:
            raise ValueError(f"the held-out fold is one of 0..{self.folds - 1}")
        if self.split not in folds.SPLITS:
            raise ValueError(f"unknown split {self.split!r}: one of {', '.join(folds.SPLITS)}")


@dataclass
class MetaExample:
    uuid: str
    pair: meta.Pair
    features: torch.Tensor  # [tokens, layers * hidden], from the frozen trunk
    object_mask: torch.Tensor  # 1.0 on the object's tokens in the document (for validation only)
    weight: float = 1.0  # the pair's share in phi's loss (see --balance)


# -- data ------------------------------------------------------------------------------------------
def variant_pool(data: Path) -> list[lama_ckl.Row]:
    """Every variant_dev row, one per uuid, in uuid order: the pool the folds cut (here and in the benchmark)."""
    return lama_ckl.once(sorted(lama_ckl.read_rows(lama_ckl.data_files(data)[0]), key=lambda r: r.uuid))


def select_variant(pool: list[lama_ckl.Row], rule: DataRule) -> tuple[list[lama_ckl.Row], list[lama_ckl.Row]]:
    """(trained on, held out) of the variant_dev pool under the rule."""
    if rule.rule == "paper":
        return [], []
    if not rule.folds:
        return pool, []
    held_out = folds.make_folds(pool, rule.folds, rule.split, rule.fold_seed)[rule.hold_out]
    held = {r.uuid for r in held_out}
    return [r for r in pool if r.uuid not in held], held_out


INVARIANT_RULE = "invariant rows the base model scores 0 on (teacher-forced task_descriptive), one per uuid"


def variant_provenance(rule: DataRule, pool: list[lama_ckl.Row], trained: list[lama_ckl.Row],
                       held_out: list[lama_ckl.Row]) -> dict[str, Any]:
    folded = {"split": rule.split, "hold_out": rule.hold_out, "fold_seed": rule.fold_seed} if rule.folds else {}
    return {"folds": rule.folds, **folded, "pool_rows": len(pool), "pool_uuids_sha256": uuids_digest(pool),
            "trained_rows": len(trained), "trained_uuids_sha256": uuids_digest(trained),
            "held_out_uuids_sha256": uuids_digest(held_out), "held_out_uuids": [r.uuid for r in held_out]}


def meta_rows(loaded: LoadedModel, data: Path, results_root: Path, model: str,
              rule: DataRule) -> tuple[list[lama_ckl.Row], list[lama_ckl.Row], dict]:
    """(invariant rows the model gets wrong, variant_dev rows trained on, provenance)."""
    files = lama_ckl.data_files(data)
    invariant = lama_ckl.read_invariant(data)
    scores = lama_ckl.tailor_scores(loaded, invariant, lama_ckl.tailoring_cache(results_root, model, files))
    # One row per uuid: the two invariant files share identical rows, and a row in both would otherwise
    # be trained on twice, or land in training and validation at once.
    wrong = lama_ckl.once(sorted((r for r in invariant if scores[r.uuid] == 0.0), key=lambda r: r.uuid))
    used = files if rule.rule == "with-variant" else files[1:]
    provenance: dict[str, Any] = {"files": {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in used},
                                  "protocol": rule.rule}
    if rule.rule == "paper":
        provenance["rule"] = INVARIANT_RULE + "; variant_dev and invariant rows scored 1 are never used"
        return wrong, [], provenance
    pool = variant_pool(data)
    trained, held_out = select_variant(pool, rule)
    but = f" but fold {rule.hold_out} of {rule.folds} (by {rule.split}, seed {rule.fold_seed})" if rule.folds else ""
    provenance["rule"] = f"{INVARIANT_RULE}, and the rows of variant_dev{but}; invariant rows scored 1 are never used"
    provenance["variant_dev"] = variant_provenance(rule, pool, trained, held_out)
    return wrong, trained, provenance


def training_rows(loaded: LoadedModel, train_config: TrainConfig, data: Path, results_root: Path, model: str,
                  rule: DataRule) -> tuple[list[lama_ckl.Row], list[lama_ckl.Row], dict]:
    """(validation rows, training rows, provenance): the invariant rows the model gets wrong, shuffled with the
    seed, the first `val` of them held out for validation, the rest and the variant_dev rows of the rule train."""
    rows, variant_rows, provenance = meta_rows(loaded, data, results_root, model, rule)
    random.Random(train_config.seed).shuffle(rows)
    val_rows = rows[: train_config.val]
    # Validation stays on invariant rows; a row in more than one source trains once and never validates.
    train_rows = lama_ckl.once(val_rows + rows[train_config.val :] + variant_rows)[len(val_rows):]
    provenance.update({"train_pairs": len(train_rows), "val_pairs": len(val_rows),
                       "train_uuids_sha256": uuids_digest(train_rows), "val_uuids_sha256": uuids_digest(val_rows),
                       "val_uuids": [r.uuid for r in val_rows], "train_uuids": [r.uuid for r in train_rows]})
    return val_rows, train_rows, provenance


def uuids_digest(rows: list[Any]) -> str:
    return hashlib.sha256("\n".join(r.uuid for r in rows).encode()).hexdigest()


def balance_weights(answers: list[tuple[str, str]]) -> list[float]:
    """1 / (pairs sharing the (relation, answer)), scaled so the weights average 1."""
    counts = Counter(answers)
    raw = [1.0 / counts[a] for a in answers]
    return [w * len(raw) / sum(raw) for w in raw]


def build_examples(loaded: LoadedModel, model: torch.nn.Module, rows: list[lama_ckl.Row], config: phi.PhiConfig,
                   max_tokens: int, cache: Path) -> list[MetaExample]:
    """Token ids, trunk features and object masks per row; the features are cached in `cache`."""
    stored = torch.load(cache) if cache.exists() else {}
    examples = []
    for row in tqdm(rows, desc="trunk features", leave=False):
        enc = loaded.tokenizer(row.evidence, return_offsets_mapping=True, truncation=True, max_length=max_tokens)
        ids = enc["input_ids"]
        task_ids, start = encode_probe(loaded.tokenizer, row.probe)
        mask = weighting.oracle(enc["offset_mapping"], row.evidence, [row.object])
        if row.uuid not in stored:
            stored[row.uuid] = phi.trunk_features(model, ids, config).half()
        examples.append(MetaExample(row.uuid, meta.Pair(ids, task_ids, start), stored[row.uuid].float(),
                                    torch.tensor(mask)))
    cache.parent.mkdir(parents=True, exist_ok=True)
    torch.save(stored, cache)
    return examples


def features_cache_name(config: phi.PhiConfig, max_tokens: int) -> str:
    """One cache per window length and set of trunk layers: heads reading other layers never share one."""
    return f"features-{max_tokens}-layers-{'-'.join(map(str, config.layers))}.pt"


def alignments_cache_name(train_config: TrainConfig) -> str:
    return f"alignments-{train_config.max_tokens}-{train_config.inner_lr}.pt"


def cached_alignments(model: torch.nn.Module, examples: list[MetaExample], inner_lr: float,
                      cache: Path) -> dict[str, torch.Tensor]:
    stored = torch.load(cache) if cache.exists() else {}
    theta = meta.adapter_params(model)
    missing = [e for e in examples if e.uuid not in stored]
    for i, ex in enumerate(tqdm(missing, desc="alignments", leave=False)):
        stored[ex.uuid] = meta.alignments(model, theta, ex.pair, inner_lr)
        if i % 50 == 49:  # the slow part: keep what is done if interrupted
            torch.save(stored, cache)
    torch.save(stored, cache)
    return stored


# -- validation ------------------------------------------------------------------------------------
def object_weight_ratio(head: phi.PhiHead, examples: list[MetaExample]) -> float:
    """Mean weight on the object's tokens over mean weight on the other predicted tokens."""
    on, off = [], []
    with torch.no_grad():
        for ex in examples:
            w, m = head(ex.features)[1:], ex.object_mask[1:].bool()
            if m.any() and (~m).any():
                on.append(w[m].mean())
                off.append(w[~m].mean())
    return float(torch.stack(on).mean() / torch.stack(off).mean())


def validate(head: phi.PhiHead, model: torch.nn.Module, examples: list[MetaExample], train_config: TrainConfig,
             alignments: dict[str, torch.Tensor] | None) -> dict[str, float]:
    theta = meta.adapter_params(model)
    with torch.no_grad():
        weights = [head(ex.features) for ex in examples]
    out = {"object_weight_ratio": object_weight_ratio(head, examples),
           "mean_weight": float(torch.cat([w[1:] for w in weights]).mean()),
           "outer_loss": sum(meta.outer_loss_after_step(model, theta, ex.pair, w, train_config.inner_lr)
                             for ex, w in zip(examples[: train_config.val_outer], weights)) / train_config.val_outer}
    if alignments is not None:
        out["first_order_objective"] = float(sum(meta.first_order_objective(w, alignments[ex.uuid])
                                                 for ex, w in zip(examples, weights)) / len(examples))
    return {k: round(v, 4) for k, v in out.items()}


def reference_outer_losses(model: torch.nn.Module, examples: list[MetaExample], train_config: TrainConfig) -> dict:
    """The validation outer loss with uniform and with oracle weights: the floor and the target."""
    theta = meta.adapter_params(model)
    picked = examples[: train_config.val_outer]

    def mean(weights_of) -> float:
        return round(sum(meta.outer_loss_after_step(model, theta, ex.pair, weights_of(ex), train_config.inner_lr)
                         for ex in picked) / len(picked), 4)
    return {"uniform": mean(lambda ex: torch.ones(len(ex.pair.doc_ids))),
            "oracle": mean(lambda ex: ex.object_mask.clamp(min=1e-3))}


# -- the loop --------------------------------------------------------------------------------------
def batch_at(step: int, n_examples: int, train_config: TrainConfig) -> list[int]:
    """The examples of phi step `step`: passes over a seeded shuffle, the order a function of the pass alone
    (so a resumed run and any other loop over the same examples take the same batches)."""
    per_pass = max(1, n_examples // train_config.batch)
    order = random.Random(train_config.seed + step // per_pass).sample(range(n_examples), n_examples)
    i = (step % per_pass) * train_config.batch
    return order[i : i + train_config.batch]


def new_head(config: phi.PhiConfig, train_config: TrainConfig) -> tuple[phi.PhiHead, torch.optim.Optimizer]:
    """phi's initial head (seeded) and its optimizer."""
    torch.manual_seed(train_config.seed)
    head = phi.make_head(config)
    return head, torch.optim.AdamW(head.parameters(), lr=train_config.lr)


def phi_step(head: phi.PhiHead, optimizer: torch.optim.Optimizer, model: torch.nn.Module,
             examples: list[MetaExample], step: int, train_config: TrainConfig,
             alignments: dict[str, torch.Tensor] | None) -> float:
    """One optimizer step of phi on step `step`'s batch; returns the batch's mean loss."""
    batch = [examples[j] for j in batch_at(step, len(examples), train_config)]
    optimizer.zero_grad(set_to_none=True)
    loss = meta_step(head, model, batch, train_config, alignments)
    optimizer.step()
    return loss


def meta_step(head: phi.PhiHead, model: torch.nn.Module, batch: list[MetaExample], train_config: TrainConfig,
              alignments: dict[str, torch.Tensor] | None) -> float:
    """Accumulate phi's gradient over the batch (each pair from a fresh adapter); returns the batch's mean loss.
    `alignments`: the first-order variant's targets, per uuid (the other variants need none)."""
    total = 0.0
    theta = meta.adapter_params(model) if train_config.variant == "exact" else {}
    for ex in batch:
        weights = head(ex.features)
        if train_config.variant == "answer":
            loss = meta.answer_objective(weights, ex.object_mask)
        elif train_config.variant == "exact":
            loss = meta.exact_outer_loss(model, theta, ex.pair, weights, train_config.inner_lr)
        else:
            loss = meta.first_order_objective(weights, alignments[ex.uuid])
        (loss * ex.weight / len(batch)).backward()
        total += loss.item() * ex.weight / len(batch)
    return total


def train(loaded: LoadedModel, train_config: TrainConfig, data: Path, out: Path, results_root: Path, model_name: str,
          resume: bool, rule: DataRule = DataRule()) -> tuple[phi.PhiHead, dict[str, Any]]:
    loaded.model.set_attn_implementation("eager")  # the exact meta-gradient needs attention's double backward
    torch.manual_seed(train_config.seed)  # the adapter's A matrices, and phi's initial head
    method = AdapterMethod(loaded.model, loaded.tokenizer,
                           Settings(lora_rank=train_config.lora_rank, lora_alpha=train_config.lora_alpha))
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


def run_name(variant: str, rule: DataRule) -> str:
    """The run folder's name: one per variant and rule, so runs of different data never resume each other."""
    if rule.rule == "paper":
        return variant
    return f"{variant}-{rule.rule}" + (f"-{rule.split}-k{rule.folds}-seed{rule.fold_seed}-fold{rule.hold_out}"
                                       if rule.folds else "")


def main(argv: list[str]) -> None:
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
    parser.add_argument("--data", type=Path, default=lama_ckl.DEFAULT_DATA)
    parser.add_argument("--out", type=Path, help="run folder (default bench-results/train-attention/<variant>, "
                        "and the rule and fold after it)")
    parser.add_argument("--checkpoint", type=Path, help="where the trained phi goes (default: the packaged one; "
                        "with --folds, phi in the run folder)")
    parser.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    args = parser.parse_args(argv)
    train_config = TrainConfig(**{k: getattr(args, k) for k in asdict(defaults) if hasattr(args, k)})
    try:
        rule = DataRule(args.rule, args.folds, args.hold_out, args.split, args.fold_seed)
    except ValueError as e:
        parser.error(str(e))
    if not args.data.is_dir():
        raise SystemExit(f"no LAMA-ckl data in {args.data}: pass --data")
    results_root = RESULTS_ROOT
    out = args.out or results_root / "train-attention" / run_name(args.variant, rule)
    # A phi that held a fold out is for cross-fitting, never the packaged one.
    destination = args.checkpoint or (out / "phi" if rule.folds else phi.packaged_checkpoint(args.model, args.variant))
    loaded = load_model(Settings(model=args.model))
    train_and_save(loaded, train_config, rule, args.data, out, results_root, args.model, destination,
                   "ckl train-attention " + " ".join(argv), args.resume)
    print(f"phi written to {destination}.safetensors (+ .json); curve in {out / 'curve.json'}")
