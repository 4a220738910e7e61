"""`ckl bench lama-orders RESULTS...`: LAMA-ckl runs of the same rows in other training orders, side by side.

Many TO-LEARN rows share a (relation, answer), and the model learns such a group together or not at all, so
one run's Top Acc moves with the order the rows are batched in (`ckl bench lama-ckl --order-seed N`). This
prints each method's Top Acc per order, the mean and spread of its Top Acc, NF Acc and Total Knowledge, and
its Top Acc as a share of a reference method's (per order, and of the means): the comparison the goals are
written in. Then the rows each method learned in the largest group and outside the largest groups, per order:
the tail of small groups is where a method's weights, not the order, decide what is learned.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from bench.lama_ckl.report import SHOWN_GROUPS as LARGEST  # the groups results.md lists; outside them: the tail
from bench.lama_ckl.report import answer_groups, best_scores, learned_by_group

Orders = dict[int, dict[str, dict[str, Any]]]  # training order -> method -> its results (by_order)


def order_of(run: dict[str, Any]) -> int:
    config = run["config"]
    return config["seed"] if config.get("order_seed") is None else config["order_seed"]


def by_order(runs: list[dict[str, Any]]) -> Orders:
    """The methods of every training order, from one run or several of that order (a method once per order)."""
    if len({(tuple(r["tailoring"]["to_learn_uuids"]), tuple(r["tailoring"]["nf_uuids"]), r["config"]["epochs"])
            for r in runs}) != 1:
        raise SystemExit("the runs do not share their TO-LEARN and NF rows and epochs: compare runs of one --seed")
    orders: Orders = {}
    for run in runs:
        methods = orders.setdefault(order_of(run), {})
        for m in run["methods"]:
            if m["method"] in methods:
                raise SystemExit(f"{m['method']} is in two runs of training order {order_of(run)}")
            methods[m["method"]] = m
    return dict(sorted(orders.items()))


def runs_table(orders: Orders, reference: str) -> dict[str, dict[str, list[float]]]:
    """Per method in every training order: its Top Acc, NF Acc, Total Knowledge and Top Acc over `reference`'s,
    one entry per order."""
    table: dict[str, dict[str, list[float]]] = {}
    for methods in orders.values():
        if reference not in methods:
            raise SystemExit(f"a training order has no {reference}: pass --reference")
        for name, m in methods.items():
            row = table.setdefault(name, {"top_acc": [], "nf_acc": [], "total_knowledge": [], "share": []})
            row["top_acc"].append(m["top_acc"])
            row["nf_acc"].append(m["nf_acc"])
            row["total_knowledge"].append(m["total_knowledge"])
            row["share"].append(m["top_acc"] / methods[reference]["top_acc"])
    return {name: row for name, row in table.items() if len(row["top_acc"]) == len(orders)}


def group_rows(orders: Orders, groups: dict[tuple[str, str], list[int]]) -> dict[str, dict[str, list[float]]]:
    """Per method in every training order: rows learned in the largest of `groups` (report.answer_groups) and in
    the rows outside the `LARGEST` largest, one entry per order."""
    largest, top = next(iter(groups)), list(groups)[:LARGEST]
    table: dict[str, dict[str, list[float]]] = {}
    for methods in orders.values():
        for name, m in methods.items():
            learned = learned_by_group(groups, best_scores(m))
            row = table.setdefault(name, {"largest": [], "tail": []})
            row["largest"].append(learned[largest])
            row["tail"].append(sum(v for answer, v in learned.items() if answer not in top))
    return {name: row for name, row in table.items() if len(row["largest"]) == len(orders)}


def listed(values: list[float], digits: int = 3) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values)


def spread(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench lama-orders", description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, nargs="+", help="results.json of runs that differ in --order-seed "
                        "(several runs of one order add up their methods)")
    parser.add_argument("--reference", default="oracle", help="the method the shares are of")
    args = parser.parse_args(argv)
    runs = [json.loads(p.read_text()) for p in args.results]
    orders = by_order(runs)
    table = runs_table(orders, args.reference)
    print(f"{len(runs)} runs, training orders {list(orders)}; mean ± sd over the orders")
    print(f"| method | Top Acc per order | Top Acc | NF Acc | Total Knowledge | of {args.reference}'s, per order | "
          "of its mean |")
    print("|---|---|---|---|---|---|---|")
    mean_reference = statistics.mean(table[args.reference]["top_acc"])
    for name, row in table.items():
        print(f"| {name} | {listed(row['top_acc'])} | {spread(row['top_acc'])} | {spread(row['nf_acc'])} | "
              f"{spread(row['total_knowledge'])} | {listed(row['share'], 2)} | "
              f"{statistics.mean(row['top_acc']) / mean_reference:.3f} |")
    groups = answer_groups([tuple(a) for a in runs[0]["tailoring"]["to_learn_answers"]])
    ((relation, answer), largest), = list(groups.items())[:1]
    tail = sum(len(rows) for rows in list(groups.values())[LARGEST:])
    rows = group_rows(orders, groups)
    mean_tail = statistics.mean(rows[args.reference]["tail"])
    print(f"\nRows learned per order: in the largest group, {answer} ({relation}, {len(largest)} rows), "
          f"and in the {tail} rows outside the {LARGEST} largest groups")
    print(f"| method | {answer} | outside | outside, of {args.reference}'s mean |")
    print("|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {listed(row['largest'], 0)} | {listed(row['tail'], 0)} | "
              f"{statistics.mean(row['tail']) / mean_tail:.3f} |")
