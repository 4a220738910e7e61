"""`ckl bench phi-facts`: where phi puts its weight in documents like those users send, the invented facts of
bench/facts.jsonl (not LAMA rows, whose relations phi may have been meta-trained on). For each packaged phi
(and any `--phi PATH`): the share of the thresholded weight on the answer's tokens, and how often the answer
holds the most weighted token, or one of the three most weighted."""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bench.phi_transfer import object_share
from bench.teach import FACTS
from core.model.loader import load_model
from core.settings import Settings
from workers import weighting
from workers.train_attention.phi import TrainAttention, packaged_checkpoint

PACKAGED = ("answer", "answer-paper", "first-order", "first-order-paper", "exact")


def answer_rank(weights: list[float], mask: list[float]) -> int:
    """The rank (0 = most weighted) of the answer's best token among the predicted positions."""
    order = sorted(range(1, len(weights)), key=lambda i: -weights[i])
    return min(order.index(i) for i in range(1, len(mask)) if mask[i])


def on_facts(phi: TrainAttention, tokenizer, facts: list[dict], threshold: float) -> dict[str, float]:
    shares, uniform, ranks = [], [], []
    for fact in facts:
        enc = tokenizer(fact["text"], return_offsets_mapping=True)
        mask = weighting.oracle(enc["offset_mapping"], fact["text"], [fact["probe"]["answer"]])
        weights = weighting.thresholded(phi.weights(enc["input_ids"]), threshold)
        shares.append(object_share(weights, mask))
        uniform.append(object_share(weighting.uniform(len(mask)), mask))
        ranks.append(answer_rank(weights, mask))
    return {"facts": len(facts), "answer_share": statistics.mean(shares), "uniform_share": statistics.mean(uniform),
            "answer_first": sum(r == 0 for r in ranks), "answer_in_top_3": sum(r < 3 for r in ranks)}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench phi-facts", description=__doc__.split("\n")[0])
    parser.add_argument("--phi", type=Path, action="append", default=[], help="another phi checkpoint (no suffix)")
    parser.add_argument("--threshold", type=float, default=Settings().training.weight_threshold)
    parser.add_argument("--facts", type=Path, default=FACTS)
    args = parser.parse_args(argv)
    settings = Settings()
    loaded = load_model(settings)
    facts = [json.loads(line) for line in args.facts.read_text().splitlines() if line.strip()]
    phis = {name: packaged_checkpoint(settings.model, name) for name in PACKAGED}
    phis.update({str(path): path for path in args.phi})
    print(f"{len(facts)} facts of {args.facts}, threshold {args.threshold}; share = weight on the answer's tokens / "
          "all weight")
    for name, path in phis.items():
        if not path.with_suffix(".json").exists():
            continue
        m = on_facts(TrainAttention.from_path(loaded.model, path), loaded.tokenizer, facts, args.threshold)
        print(f"{name:24s} share {m['answer_share']:.3f} (uniform {m['uniform_share']:.3f})  answer first in "
              f"{m['answer_first']}, in the top 3 in {m['answer_in_top_3']}")
