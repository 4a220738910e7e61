"""Which LAMA-ckl rows phi meta-trains and validates on (`ckl train-attention --rule`), and their provenance.

Always the invariant rows (invariant_descriptive + invariant_schematic) that the base model gets wrong
(tailoring score 0, the benchmark's own cached scores), never the invariant rows it gets right (the
NOT-TO-FORGET pool). `paper` (the default, the paper's protocol) stops there; `with-variant` adds the rows
of variant_dev (the TO-LEARN pool's file): all of them (the packaged phi), or all but one of `--folds` folds
(`--hold-out`, `--split uuid|group`, `--fold-seed`: research/train_attention/folds.py), so that LAMA-ckl can weigh
each TO-LEARN row with a phi that never saw it. One pair per uuid (the two invariant files share rows); the
invariant pairs are sorted by uuid and shuffled with the seed; the first `--val` of them are held out for
validation, the rest and the variant pairs train. The checkpoint's json records the data files' sha256, the
rule, the uuids trained on and validated on, and for `with-variant` the split, k, the held-out fold and its
uuids. With `--balance`, each training pair counts 1 / (training pairs with the same relation and answer):
one (relation, answer) can make up a large share of the pairs, the same lesson over and over
(docs/decisions.md: Count learning per (relation, answer)).
"""
from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.model.loader import LoadedModel
from research import lama_ckl
from research.train_attention import folds
from research.train_attention.config import TrainConfig

RULES = ("paper", "with-variant")
INVARIANT_RULE = "invariant rows the base model scores 0 on (teacher-forced task_descriptive), one per uuid"


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


PAPER_RULE = DataRule()  # the paper's protocol: invariant rows only


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
