"""`ckl bench known-names`: how surprised the served model is by each subject's name (the negative log-likelihood of
its tokens after the BOS, in nats), beside wordfreq's verdict (`core/subjects.py: familiar`) and whether its set gave
it neighbour prompts (a subject the set's author took as well known). No server. docs/decisions.md: "Two sets
written apart, answered as shipped"."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from core.model.loader import load_model
from core.settings import Settings
from core.subjects import familiar

SETS = Path(__file__).parent / "sets"
TUNING = ("paragraphs-dev.jsonl", "paragraphs-dev2.jsonl", "well-known-dev.jsonl", "streams-dev.jsonl")


def surprise(model, tokenizer, name: str) -> tuple[float, int]:
    """The name's tokens' negative log-likelihood after the BOS, summed, and how many tokens it has."""
    ids = tokenizer(name, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, :-1].float()
    chosen = torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])
    return -chosen.sum().item(), ids.shape[1] - 1


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench known-names", description=__doc__)
    parser.add_argument("sets", type=Path, nargs="*", default=[SETS / name for name in TUNING])
    args = parser.parse_args(argv)
    subjects: dict[str, bool] = {}
    for path in args.sets:
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                subjects[row["subject"]] = subjects.get(row["subject"], False) or bool(row.get("neighbours"))
    loaded = load_model(Settings())
    rows = [(name, *surprise(loaded.model, loaded.tokenizer, name), told) for name, told in subjects.items()]
    print("nats   tokens  wordfreq   neighbours  name")
    for name, nats, tokens, told in sorted(rows, key=lambda row: row[1]):
        print(f"{nats:6.2f} {tokens:6d}  {'known' if familiar(name.lower()) else 'invented':9s}  "
              f"{'yes' if told else '':10s}  {name}")
