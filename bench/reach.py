"""`ckl bench reach`: how often a fact's prompt reaches its own document as context, without the model. For each
set and each form (cloze, paraphrase, question), the share of facts whose prompt is routed to the document that
states them, by the key a document not learned yet is read by (`reading_key`, with the `named` fallback) against
the learner's key made from the text alone (`key_for` without probes); BM25's first document beside them; and
how many general prompts (bench/general_prompts.txt) would read any of the set's documents. A document's key
made once it is learned holds what its made probes ask too, so this is the reach before learning."""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from bench.answering import FORMS
from bench.retrieval import bm25_top
from bench.teach import general_prompts
from core.routing import key_for, reading_key, route
from core.settings import Settings
from service.accepted import Accepted
from service.in_context import MAX_DOCUMENTS

Reach = Callable[[str], set[str]]  # the documents a prompt reaches


def ways(texts: list[str], threshold: float) -> dict[str, Reach]:
    """The text-only key, routed; and the reading key, as the service reaches a pending document (route, then name)."""
    text_keys = [(str(i), key_for(t, [], threshold)) for i, t in enumerate(texts)]
    reading = [(str(i), reading_key(t, [], threshold)) for i, t in enumerate(texts)]
    accepted = Accepted(threshold)
    return {"text_key": lambda prompt: set(route(prompt, text_keys, threshold) or ()),
            "reading_key": lambda prompt: {u["document_id"] for u in accepted.reached(prompt, reading, MAX_DOCUMENTS)}}


def shares(texts: list[str], facts: list[tuple[int, dict]], threshold: float) -> dict:
    """Per way, per form: the facts whose prompt reaches their own document, and the general prompts reaching any."""
    reach = ways(texts, threshold)
    out: dict = {}
    for form, (field, _) in FORMS.items():
        if form == "chat":
            continue
        asked = [(i, fact[field]["prompt"]) for i, fact in facts if fact.get(field)]
        row = {way: sum(str(i) in reached(p) for i, p in asked) for way, reached in reach.items()}
        out[form] = {**row, "bm25_first": sum(bm25_top(p, texts, 1) == [i] for i, p in asked), "of": len(asked)}
    out["general_reaching"] = {way: sum(bool(reached(p)) for p in general_prompts()) for way, reached in reach.items()}
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench reach", description=__doc__)
    parser.add_argument("sets", type=Path, nargs="+", help="JSONL sets of documents with `facts` (bench/sets/)")
    args = parser.parse_args(argv)
    threshold = Settings().routing_threshold
    for path in args.sets:
        documents = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        facts = [(i, fact) for i, doc in enumerate(documents) for fact in doc.get("facts", [])]
        print(path.name, json.dumps(shares([doc["text"] for doc in documents], facts, threshold)))
