"""LAMA-ckl data: its rows, the base model's tailoring scores, and the TO-LEARN / NOT-TO-FORGET split.

Here rather than in bench/ because `ckl train-attention` meta-trains phi on these rows and must pick
them as the benchmark does (the same files, scores and cache); the service never reads them. The data is
not shipped: every command that reads it takes its folder as a flag (`--data`), else from CKL_LAMA_DIR.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

from core.model.loader import LoadedModel
from core.probes import lama_probe
from core.scoring import Probe, score_probes

DATA_ENV = "CKL_LAMA_DIR"  # the LAMA-ckl folder, when a command is not given one


@dataclass(frozen=True)
class Row:
    uuid: str
    evidence: str
    object: str
    probe: Probe
    relation: str = ""


def read_rows(path: Path, limit: int | None = None) -> list[Row]:
    rows = []
    for line in path.read_text().splitlines()[:limit]:
        raw = json.loads(line)
        probe = lama_probe(raw)
        if probe is not None:
            rows.append(Row(raw["uuid"], raw["evidence"], raw["object"], probe, raw.get("relation_label", "")))
    return rows


def env_data() -> Path | None:
    """The folder CKL_LAMA_DIR names, if it is set."""
    return Path(value) if (value := os.environ.get(DATA_ENV)) else None


def add_data_argument(parser: argparse.ArgumentParser, flag: str = "--data",
                      help_text: str = "folder with the LAMA-ckl jsonl files") -> None:
    """The flag that names the LAMA-ckl folder, defaulting to CKL_LAMA_DIR (None when neither is given)."""
    parser.add_argument(flag, type=Path, default=env_data(), help=f"{help_text} (default: ${DATA_ENV})")


def data_folder(folder: Path | None, flag: str = "--data") -> Path:
    """`folder` when it is one, else SystemExit saying how to name it."""
    if folder is None:
        raise SystemExit(f"no LAMA-ckl folder: pass {flag} or set {DATA_ENV} (the folder holding "
                         "variant_dev.jsonl, invariant_descriptive.jsonl and invariant_schematic.jsonl; see README "
                         "for where it comes from)")
    if not folder.is_dir():
        raise SystemExit(f"no LAMA-ckl data in {folder}: pass {flag} or set {DATA_ENV} "
                         "(see README for where it comes from)")
    return folder


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
    """The first row of each uuid, in order: the two invariant files share rows (docs/decisions.md: One row
    per uuid)."""
    seen: set[str] = set()
    return [r for r in rows if not (r.uuid in seen or seen.add(r.uuid))]
