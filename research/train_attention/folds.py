"""k folds of LAMA-ckl rows for cross-fitting phi: by uuid, or by (relation, answer) group.

Why the group split as well: many TO-LEARN rows share a relation and answer (one answer alone fills a
large share of variant_dev: docs/decisions.md, Count learning per (relation, answer)). Split by uuid, the
phi that weighs a held-out row was trained on rows with the same answer; split by group, it never met the
answer, which is what a user's new fact looks like.
"""
from __future__ import annotations

import random
from collections.abc import Sequence

from research.lama_ckl import Row

SPLITS = ("uuid", "group")


def group_key(row: Row) -> tuple[str, str]:
    """The (relation, answer) a row teaches, as the benchmark's report groups them."""
    return row.relation, row.object


def by_uuid(rows: Sequence[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: r.uuid)


def uuid_folds(rows: Sequence[Row], k: int, seed: int) -> list[list[Row]]:
    """The rows in uuid order, shuffled with the seed and dealt out in turn: sizes differ by at most one."""
    order = by_uuid(rows)
    random.Random(seed).shuffle(order)
    return [by_uuid(order[i::k]) for i in range(k)]


def group_folds(rows: Sequence[Row], k: int, seed: int) -> list[list[Row]]:
    """Whole groups, largest first (equal sizes in a seeded order), each into the fold with the fewest rows
    so far: as even as whole groups allow."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in by_uuid(rows):
        groups.setdefault(group_key(row), []).append(row)
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    keys.sort(key=lambda key: -len(groups[key]))  # stable: the seeded order stays among equal sizes
    folds: list[list[Row]] = [[] for _ in range(k)]
    for key in keys:
        min(folds, key=len).extend(groups[key])
    return [by_uuid(fold) for fold in folds]


def make_folds(rows: Sequence[Row], k: int, split: str, seed: int) -> list[list[Row]]:
    """k disjoint folds covering `rows` (one row per uuid), deterministic in `seed` and not in the rows' order."""
    uuids = [r.uuid for r in rows]
    if len(set(uuids)) != len(uuids):
        raise ValueError("folds need one row per uuid (lama_ckl.once)")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: one of {', '.join(SPLITS)}")
    units = len(rows) if split == "uuid" else len({group_key(r) for r in rows})
    if not 2 <= k <= units:
        raise ValueError(f"{k} folds by {split}: need 2 to {units}")
    return uuid_folds(rows, k, seed) if split == "uuid" else group_folds(rows, k, seed)


def fold_index(folds: Sequence[Sequence[Row]]) -> dict[str, int]:
    """uuid -> the fold holding it."""
    return {row.uuid: i for i, fold in enumerate(folds) for row in fold}
