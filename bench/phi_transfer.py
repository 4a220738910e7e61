"""`ckl bench phi-transfer`: does phi find the fact in documents unlike those it was meta-trained on?

phi is meta-trained on invariant LAMA-ckl rows; the benchmark's TO-LEARN rows come from
variant_dev, whose relations are different ones. For each packaged phi, on its own validation
documents and on the TO-LEARN documents (the 64 reported rows and the whole pool): the share of the
thresholded weight that falls on the object's tokens (what the weighted loss spends on the answer;
Oracle's share is 1, uniform weights' is the object's share of the tokens) and how often the most
weighted token is one of the object's.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from core.model.loader import load_model
from core.settings import Settings
from research import lama_ckl
from research.provenance import RESULTS_ROOT
from research.train_attention.config import VARIANTS
from workers import weighting
from workers.train_attention.phi import TrainAttention, packaged_checkpoint

REPORTED_ROWS = 64  # what `ckl bench lama-ckl --to-learn 64` trains on


def object_share(weights: list[float], mask: list[float]) -> float:
    """The share of the weight (position 0 excluded) on the object's tokens."""
    total = sum(weights[1:])
    return sum(w * m for w, m in zip(weights[1:], mask[1:])) / total if total else 0.0


def top_is_object(weights: list[float], mask: list[float]) -> bool:
    """Whether the most weighted predicted token is one of the object's."""
    best = max(range(1, len(weights)), key=lambda i: weights[i])
    return mask[best] > 0


def relations(files: list[Path]) -> dict[str, str]:
    """uuid -> relation label, over the LAMA-ckl files."""
    return {raw["uuid"]: raw["relation_label"] for f in files for raw in map(json.loads, f.read_text().splitlines())}


def measure(phi: TrainAttention, tokenizer, rows: list[lama_ckl.Row], threshold: float, max_tokens: int) -> dict:
    """Mean object share (phi's thresholded weights, and uniform weights) and the top-token hit rate, over the
    rows whose object occurs within the first `max_tokens` tokens."""
    shares, uniform_shares, hits = [], [], []
    for row in rows:
        enc = tokenizer(row.evidence, return_offsets_mapping=True, truncation=True, max_length=max_tokens)
        mask = weighting.oracle(enc["offset_mapping"], row.evidence, [row.object])
        if not any(mask):
            continue
        weights = weighting.thresholded(phi.weights(enc["input_ids"]), threshold)
        shares.append(object_share(weights, mask))
        uniform_shares.append(object_share(weighting.uniform(len(mask)), mask))
        hits.append(top_is_object(weights, mask))
    return {"documents": len(shares), "object_share": statistics.mean(shares),
            "uniform_share": statistics.mean(uniform_shares), "top_is_object": sum(hits) / len(hits)}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench phi-transfer", description=__doc__.split("\n")[0])
    parser.add_argument("--threshold", type=float, default=Settings().training.weight_threshold)
    parser.add_argument("--max-tokens", type=int, default=128)
    lama_ckl.add_data_argument(parser)
    args = parser.parse_args(argv)
    args.data = lama_ckl.data_folder(args.data)

    settings = Settings()
    loaded = load_model(settings)
    files = lama_ckl.data_files(args.data)
    variant, invariant = lama_ckl.read_pools(args.data)
    scores = lama_ckl.tailor_scores(loaded, variant + invariant,
                                    lama_ckl.tailoring_cache(RESULTS_ROOT, settings.model, files))
    pool, _ = lama_ckl.split(variant, invariant, scores, len(variant), 0, seed=0)
    by_uuid = {row.uuid: row for row in lama_ckl.once(invariant)}
    relation = relations(files)
    print(f"threshold {args.threshold}, first {args.max_tokens} tokens; "
          "share = weight on the object's tokens / all weight; top = most weighted token is the object's")
    for variant_name in VARIANTS:
        phi = TrainAttention.from_path(loaded.model, packaged_checkpoint(settings.model, variant_name))
        data = phi.meta["data"]
        trained_on = {relation[u] for u in data["train_uuids"]}
        sets = {"its validation documents": [by_uuid[u] for u in data["val_uuids"]],
                f"TO-LEARN, the {REPORTED_ROWS} reported rows": pool[:REPORTED_ROWS],
                f"TO-LEARN, the whole pool ({len(pool)} rows)": pool}
        shared = {relation[row.uuid] for row in pool} & trained_on
        print(f"\n{variant_name} phi (meta-trained on {len(trained_on)} relations; "
              f"{len(shared)} of them in the TO-LEARN pool)")
        for name, rows in sets.items():
            m = measure(phi, loaded.tokenizer, rows, args.threshold, args.max_tokens)
            print(f"  {name:40s} {m['documents']:4d} docs  share {m['object_share']:.3f} "
                  f"(uniform {m['uniform_share']:.3f})  top {m['top_is_object']:.2f}")
