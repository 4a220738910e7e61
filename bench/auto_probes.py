"""`ckl bench auto-probes`: how often the probes the server makes for a document sent without any ask for what a
reader would ask, on documents with known answers. No model: every token weighs the same, so this measures
the rule (workers/examples.py: auto_probes) with phi's weights aside; `ckl bench teach --no-probes` measures
it with phi. `routed_facts_covered`: the facts asked by the probes the routed method keeps (each made to reach
the document, the others left out): those it trains and gates on.

Sets: bench/facts.jsonl and bench/sets/*.jsonl (their probe's and paraphrase's answers), and with --lama the
LAMA-ckl variant rows (each descriptive sentence as a document, its object as the answer).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from bench.teach import auto_probe_quality, facts_of, same_answer
from core import routing
from core.settings import Settings
from research.lama_ckl import add_data_argument
from workers import examples

SETS = [Path(__file__).with_name("facts.jsonl"), *sorted(Path(__file__).with_name("sets").glob("*.jsonl"))]
TOKEN = re.compile(r"\w+|[^\w\s]")


def encoded(text: str) -> examples.Encoded:
    """A document as word tokens after a BOS, as a tokenizer would give them."""
    offsets = [(0, 0)] + [m.span() for m in TOKEN.finditer(text)]
    return examples.Encoded(text, list(range(len(offsets))), offsets)


def made(text: str, routed: bool = False) -> list[dict[str, str]]:
    """The probes the rule makes; with `routed`, those the default (routed) method trains and gates on: each made to
    reach the document's key (examples.checkable_auto_probes)."""
    doc = encoded(text)
    if routed:
        unreachable = lambda probes: routing.unreachable(text, probes, Settings().routing_threshold)  # noqa: E731
        probes = examples.checkable_auto_probes(doc, [1.0] * len(doc.ids), unreachable)
    else:
        probes = examples.auto_probes(doc, [1.0] * len(doc.ids))
    return [{"prompt": prompt, "answer": answer} for prompt, answer in probes]


def lama_documents(folder: Path) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "variant_dev.jsonl").read_text().splitlines() if line.strip()]
    return [{"text": row["task_descriptive"].replace(" .", ".").replace(" ,", ","),
             "probe": {"prompt": "", "answer": row["object"]}} for row in rows]


def set_documents(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def measure(documents: list[dict]) -> dict:
    """What `ckl bench teach` reports of the probes a server made (auto_probe_quality), for these made here, and
    the hidden facts no probe asks for."""
    rows = [{"auto_probes": made(doc["text"])} for doc in documents]
    quality = auto_probe_quality(documents, rows)
    trained = auto_probe_quality(documents, [{"auto_probes": made(doc["text"], routed=True)} for doc in documents])
    missed = [[fact["probe"]["prompt"], fact["probe"]["answer"]] for fact in facts_of(documents)
              if not any(same_answer(p, fact["probe"]) for p in rows[fact["document"]]["auto_probes"])]
    return {"documents": len(documents), **{k: v for k, v in quality.items() if k != "examples"},
            "routed_made": trained["made"], "routed_facts_covered": trained["facts_covered"],
            "not_covered": missed[:10]}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench auto-probes")
    add_data_argument(parser, "--lama", "LAMA-ckl folder (its variant rows as documents); without one, only the sets")
    args = parser.parse_args(argv)
    results = {path.name: measure(set_documents(path)) for path in SETS}
    if args.lama:
        results["lama_ckl variant_dev"] = measure(lama_documents(args.lama))
    print(json.dumps(results, indent=1))
