"""`ckl bench reach`: how often a fact's prompt reaches its own document, without the model. For each set and each
form (cloze, paraphrase, question), the share of facts whose prompt is routed to the document that states them: by
the key a document not learned yet is read by (`reading_key`, with the `named` fallback), by the learner's key made
from the text alone (`key_for` without probes), and by the key a document sent without probes is learned with (its
made probes' too, as `ckl bench auto-probes` makes them: every token weighing the same); BM25's first document
beside them. Then how many general prompts (bench/general_prompts.txt) and how many of the set's neighbour prompts
(other facts of the known subjects its documents are news about) reach any of its documents: each one a prompt a
delta may move."""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.answering import FORMS
from bench.auto_probes import made
from bench.retrieval import bm25_top
from bench.teach import general_prompts
from core.routing import key_for, reading_key, route
from core.settings import Settings
from service.accepted import Accepted
from service.in_context import MAX_DOCUMENTS

Reach = Callable[[str], set[str]]  # the documents a prompt reaches


def ways(texts: list[str], threshold: float) -> dict[str, Reach]:
    """The text-only key, routed; the reading key, as the service reaches a pending document (route, then name); and
    the key the learner makes with the made probes, routed."""
    text_keys = [(str(i), key_for(t, [], threshold)) for i, t in enumerate(texts)]
    reading = [(str(i), reading_key(t, [], threshold)) for i, t in enumerate(texts)]
    learned = [(str(i), reading_key(t, [(p["prompt"], p["answer"]) for p in made(t, routed=True)], threshold, True))
               for i, t in enumerate(texts)]
    accepted = Accepted(threshold)
    return {"text_key": lambda prompt: set(route(prompt, text_keys, threshold) or ()),
            "reading_key": lambda prompt: {u["document_id"] for u in accepted.reached(prompt, reading, MAX_DOCUMENTS)},
            "learned_key": lambda prompt: set(route(prompt, learned, threshold) or ())}


def shares(texts: list[str], facts: list[tuple[int, dict]], threshold: float, neighbours: Sequence[str] = ()) -> dict:
    """Per way, per form: the facts whose prompt reaches their own document; the general and the neighbour prompts
    reaching any."""
    reach = ways(texts, threshold)
    out: dict = {}
    for form, (field, _) in FORMS.items():
        if form == "chat":
            continue
        asked = [(i, fact[field]["prompt"]) for i, fact in facts if fact.get(field)]
        row = {way: sum(str(i) in reached(p) for i, p in asked) for way, reached in reach.items()}
        out[form] = {**row, "bm25_first": sum(bm25_top(p, texts, 1) == [i] for i, p in asked), "of": len(asked)}
    out["general_reaching"] = {way: sum(bool(reached(p)) for p in general_prompts()) for way, reached in reach.items()}
    if neighbours:
        routed = {way: sum(bool(reached(p)) for p in neighbours) for way, reached in reach.items()}
        out["neighbours_reaching"] = {**routed, "of": len(neighbours)}
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench reach", description=__doc__)
    parser.add_argument("sets", type=Path, nargs="+", help="JSONL sets of documents with `facts` (bench/sets/)")
    args = parser.parse_args(argv)
    threshold = Settings().routing_threshold
    for path in args.sets:
        documents = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        facts = [(i, fact) for i, doc in enumerate(documents) for fact in doc.get("facts", [])]
        neighbours = [prompt for doc in documents for prompt in doc.get("neighbours", [])]
        print(path.name, json.dumps(shares([doc["text"] for doc in documents], facts, threshold, neighbours)))
