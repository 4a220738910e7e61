"""What a LAMA-ckl run reports: Top Acc and where, the rows learned per answer, results.md and curves.png."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SHOWN_GROUPS = 10  # the largest (relation, answer) groups a table lists; the rest are summed


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


def best_scores(method: dict[str, Any]) -> list[float]:
    return next(e["to_learn_scores"] for e in method["epochs"] if e["epoch"] == method["top_epoch"])


def groups_markdown(results: dict[str, Any], shown: int = SHOWN_GROUPS) -> list[str]:
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
    config = results["config"]
    if config.get("crossfit"):
        weighed = ", ".join(f"{r['method']} {len(r['phis'])}" for r in results["methods"] if "phis" in r)
        lines.append(f"Cross-fitted: {config['crossfit']} folds of variant_dev by {config['crossfit_split']} (seed "
                     f"{config['fold_seed']}); phis per method: {weighed}. No row is weighed by a phi that saw it.")
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
