"""Which phi weighs which TO-LEARN row, and the guard that no phi weighs a row it was meta-trained on.

A method that weighs with phi gets an assignment, uuid -> phi checkpoint. As it is, every row gets the
method's own phi. With `--crossfit K`, a method whose phi saw evaluated rows instead gets, for each row,
the phi of the fold holding it, trained on the other folds (`ckl train-attention --rule with-variant
--folds K --hold-out I`, with the settings of the method's phi: the same training, one fold less of
data); a phi that saw none of the rows still weighs them itself (the paper's protocol beside). Either
way `check_unseen` runs before any method trains. A checkpoint whose json lists no uuids is taken as
the paper's protocol, invariant rows only.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from core.model.loader import LoadedModel
from research.lama_ckl import Row, data_files, file_digest
from research.train_attention import folds
from research.train_attention.config import TrainConfig
from research.train_attention.rows import DataRule, variant_pool
from research.train_attention.training import train_and_save
from workers.train_attention import phi

# The settings of phis written before the head and its layers were training settings.
OLD_HEAD = {"head": "mlp", "trunk_layers": 3}
Assignment = dict[str, Path]  # uuid -> the phi checkpoint (path without suffix) that weighs the row
Assign = Callable[[Path, list[Row]], Assignment]


def seen_uuids(checkpoint: Path) -> set[str]:
    """The uuids phi met in meta-training (trained on or validated on), from its json."""
    data = json.loads(phi.require(checkpoint).with_suffix(".json").read_text()).get("data", {})
    return set(data.get("train_uuids", [])) | set(data.get("val_uuids", []))


def as_is(checkpoint: Path, rows: list[Row]) -> Assignment:
    return {r.uuid: checkpoint for r in rows}


def check_unseen(method: str, assignment: Assignment) -> None:
    """SystemExit when a row would be weighed by a phi that was meta-trained on it."""
    for checkpoint in sorted(set(assignment.values())):
        weighed, trained = [u for u, c in assignment.items() if c == checkpoint], seen_uuids(checkpoint)
        seen = [u for u in weighed if u in trained]
        if seen:
            raise SystemExit(
                f"{method}: the phi at {checkpoint} was meta-trained on {len(seen)} of the {len(weighed)} TO-LEARN "
                f"rows it would weigh (e.g. {seen[0]}); a phi is never evaluated on rows it was trained on. Pass "
                "--crossfit K --split uuid|group (one phi per fold, each weighing only rows it never saw), or "
                "--data with rows it never saw.")


def summary(assignment: Assignment) -> dict[str, int]:
    """Rows weighed per phi checkpoint, for results.json."""
    return dict(sorted(Counter(str(c) for c in assignment.values()).items()))


@dataclass(frozen=True)
class CrossFit:
    """`--crossfit K --split S --fold-seed N`: the Assign that cross-fits phis that saw the evaluated rows."""
    k: int
    split: str
    seed: int
    data: Path
    results_root: Path
    load: Callable[[], LoadedModel]
    model_name: str

    def __call__(self, checkpoint: Path, rows: list[Row]) -> Assignment:
        if seen_uuids(checkpoint).isdisjoint(r.uuid for r in rows):
            return as_is(checkpoint, rows)
        config = TrainConfig(**{**OLD_HEAD, **phi.load_checkpoint(checkpoint).meta["train"]})
        # Validation never changes phi (nothing stops early on it), and most of a fold phi's time went to it.
        config = replace(config, validate_every=config.steps)
        pool_folds = folds.make_folds(variant_pool(self.data), self.k, self.split, self.seed)
        fold_of = folds.fold_index(pool_folds)
        outside = [r.uuid for r in rows if r.uuid not in fold_of]
        if outside:
            raise SystemExit(f"{len(outside)} TO-LEARN rows (e.g. {outside[0]}) are not in {self.data}'s variant_dev, "
                             "so no fold holds them out")
        fold_phis = {i: self.fold_phi(config, i, pool_folds[i]) for i in sorted({fold_of[r.uuid] for r in rows})}
        return {r.uuid: fold_phis[fold_of[r.uuid]] for r in rows}

    def folder(self, config: TrainConfig) -> str:
        """One cache folder per model, training settings, data and folds: a changed one never reuses a phi."""
        settings = json.dumps([asdict(config), file_digest(data_files(self.data))], sort_keys=True)
        return (f"{self.model_name.replace('/', '_')}-{config.variant}-{self.split}-k{self.k}-seed{self.seed}-"
                f"{hashlib.sha256(settings.encode()).hexdigest()[:12]}")

    def fold_phi(self, config: TrainConfig, fold: int, held_out: list[Row]) -> Path:
        """The phi that held `fold` out: from bench-results/crossfit-phis/ if there, else trained there."""
        name = self.folder(config)
        checkpoint = self.results_root / "crossfit-phis" / name / f"fold{fold}"
        if checkpoint.with_suffix(".json").exists():
            made = json.loads(checkpoint.with_suffix(".json").read_text())["data"]["variant_dev"]["held_out_uuids"]
            if made == [r.uuid for r in held_out]:
                return checkpoint
        rule = DataRule("with-variant", self.k, fold, self.split, self.seed)
        # The run folder sits beside ckl train-attention's, so the features and alignments cached per uuid are shared.
        out = self.results_root / "train-attention" / f"crossfit-{name}-fold{fold}"
        command = (f"ckl bench lama-ckl --crossfit {self.k} --split {self.split} --fold-seed {self.seed} (fold {fold}: "
                   f"ckl train-attention --rule with-variant --folds {self.k} --hold-out {fold} with the settings "
                   "in `train`)")
        train_and_save(self.load(), config, rule, self.data, out, self.results_root, self.model_name, checkpoint,
                       command, resume=True)
        return checkpoint
