"""`ckl bench phi-kept RESULTS --phis FOLDER`: which tokens the fold phis keep, and what the rows taught.

Reads a cross-fitted `ckl bench lama-ckl` run (its results.json) and the fold phis that weighed its TO-LEARN
rows (a folder of `bench-results/crossfit-phis/`), weighs each row again with the phi that held its fold out,
and prints:
- per cut (a relative threshold): tokens kept per document, how many are the answer's, the rows whose answer
  keeps any weight, and the answer's share of the weight;
- the rows split by the answer's share of phi's weight at the first cut, with Oracle's and the method's mean
  score at their best epochs. Where phi's weights are Oracle's, a difference between the two comes from
  training on the other rows;
- the largest (relation, answer) groups: phi's share on their answer and the rows each method learned there.
  Rows of one group teach each other (the model learns the relation's answer), so a group is where a few
  missed answers can cost many rows.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bench.lama_ckl.report import SHOWN_GROUPS, answer_groups, best_scores, learned_by_group
from bench.phi_transfer import object_share
from core.model.loader import load_model
from core.settings import Settings
from research import lama_ckl
from research.train_attention import folds
from research.train_attention.rows import variant_pool
from workers import examples, weighting
from workers.train_attention.phi import TrainAttention

SHARES = ((0.0, 0.01), (0.01, 0.5), (0.5, 0.99), (0.99, 1.01))  # buckets of the answer's share of the weight


def kept_stats(raw: list[list[float]], masks: list[list[float]], cut: float) -> dict[str, float]:
    kept = [weighting.thresholded(w, cut) for w in raw]
    return {"tokens_kept": statistics.mean(sum(x > 0 for x in w[1:]) for w in kept),
            "answer_tokens_kept": statistics.mean(sum(x > 0 and m > 0 for x, m in zip(w[1:], k[1:]))
                                                  for w, k in zip(kept, masks)),
            "rows_answer_kept": statistics.mean(any(x > 0 and m > 0 for x, m in zip(w[1:], k[1:]))
                                                for w, k in zip(kept, masks)),
            "answer_share": statistics.mean(object_share(w, k) for w, k in zip(kept, masks))}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench phi-kept", description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="a cross-fitted lama-ckl run's results.json")
    parser.add_argument("--phis", type=Path, required=True, help="the folder of its fold phis (fold0, fold1, ...)")
    parser.add_argument("--method", default="taalm", help="the run's method that weighed with these phis")
    parser.add_argument("--cuts", default="0.1,0.5", help="relative thresholds; the first splits the rows")
    lama_ckl.add_data_argument(parser)
    args = parser.parse_args(argv)
    args.data = lama_ckl.data_folder(args.data)
    results = json.loads(args.results.read_text())
    config, methods = results["config"], {m["method"]: m for m in results["methods"]}
    cuts = [float(c) for c in args.cuts.split(",")]
    by_uuid = {r.uuid: r for r in lama_ckl.read_pools(args.data)[0]}
    rows = [by_uuid[u] for u in results["tailoring"]["to_learn_uuids"]]
    pool_folds = folds.make_folds(variant_pool(args.data), config["crossfit"], config["crossfit_split"],
                                  config["fold_seed"])
    fold_of = folds.fold_index(pool_folds)
    loaded = load_model(Settings())
    phis = {i: TrainAttention.from_path(loaded.model, args.phis / f"fold{i}") for i in range(len(pool_folds))}
    raw, masks = [], []
    for row in rows:
        doc = examples.encode(loaded.tokenizer, row.evidence, config["max_tokens"])
        raw.append(list(phis[fold_of[row.uuid]].weights(doc.ids)))
        masks.append(weighting.oracle(doc.offsets, doc.text, [row.object]))
    print(f"{len(rows)} TO-LEARN rows, each weighed by the fold phi that held it out ({args.phis.name})")
    print("| cut | tokens kept / document | answer's tokens kept | rows with the answer kept | answer's share |")
    print("|---|---|---|---|---|")
    for cut in cuts:
        s = kept_stats(raw, masks, cut)
        print(f"| {cut} | {s['tokens_kept']:.2f} | {s['answer_tokens_kept']:.2f} | {s['rows_answer_kept']:.3f} | "
              f"{s['answer_share']:.3f} |")
    shares = [object_share(weighting.thresholded(w, cuts[0]), k) for w, k in zip(raw, masks)]
    oracle, method = best_scores(methods["oracle"]), best_scores(methods[args.method])
    print(f"\nRows by the answer's share of phi's weight at the {cuts[0]} cut; mean score at each best epoch")
    print(f"| answer's share | rows | oracle | {args.method} |")
    print("|---|---|---|---|")
    for low, high in SHARES:
        idx = [i for i, s in enumerate(shares) if low <= s < high]
        if idx:
            print(f"| [{low}, {min(high, 1.0)}{')' if high <= 1 else ']'} | {len(idx)} | "
                  f"{statistics.mean(oracle[i] for i in idx):.3f} | {statistics.mean(method[i] for i in idx):.3f} |")
    groups = answer_groups([tuple(a) for a in results["tailoring"]["to_learn_answers"]])
    learned = {name: learned_by_group(groups, scores) for name, scores in (("oracle", oracle), (args.method, method))}
    print(f"\nThe largest (relation, answer) groups: phi's share on the answer at the {cuts[0]} cut, rows learned")
    print(f"| answer (relation) | rows | answer's share | oracle | {args.method} |")
    print("|---|---|---|---|---|")
    for answer, idx in list(groups.items())[:SHOWN_GROUPS]:
        print(f"| {answer[1]} ({answer[0]}) | {len(idx)} | {statistics.mean(shares[i] for i in idx):.2f} | "
              f"{learned['oracle'][answer]:.0f} | {learned[args.method][answer]:.0f} |")
