"""`ckl bench reading`: how the model answers with a fact's own document before the prompt, as is and with the
document's sentence nearest the prompt said again right before it (service/in_context.py: `nearest_sentence`, what
knowledge as context reads). Nothing is taught: version 0 answers every request (`knowledge: "off"`), so the
numbers are the model reading, apart from routing. Each fact in its cloze, paraphrase and question forms, scored
as `ckl bench teach` scores them (bench/answering.py); per set and in all."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.answering import FORMS, answer_all, correct, share
from bench.server import running_server
from bench.teach import facts_of
from service.in_context import nearest_sentence

WAYS = {"document": lambda text, prompt: text,
        "document, nearest sentence again": lambda text, prompt: "\n".join(
            [text, *filter(None, [nearest_sentence(prompt, [text])])])}


def read(url: str, sets: list[Path]) -> dict:
    """{set: {way: {form: share}}}, and "all" over every set's facts."""
    jobs = []
    for path in sets:
        documents = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for fact in facts_of(documents):
            text = documents[fact["document"]]["text"]
            for form, (key, tokens) in FORMS.items():
                if form == "chat" or not fact.get(key):
                    continue
                probe = fact[key]
                for way, reading in WAYS.items():
                    request = {"prompt": reading(text, probe["prompt"]) + "\n" + probe["prompt"],
                               "max_new_tokens": tokens, "knowledge": "off"}
                    jobs.append((path.stem, way, form, probe["answer"], request))
    answers = answer_all(url, [("/generate", job[-1]) for job in jobs])
    right: dict = {}
    for (name, way, form, answer, _), given in zip(jobs, answers):
        for group in (name, "all"):
            right.setdefault(group, {}).setdefault(way, {}).setdefault(form, []).append(
                correct(form, answer, given["text"]))
    return {group: {way: {**{form: share(flags) for form, flags in forms.items()},
                          "facts": len(next(iter(forms.values())))} for way, forms in ways.items()}
            for group, ways in right.items()}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="ckl bench reading", description=__doc__)
    parser.add_argument("sets", type=Path, nargs="+", help="JSONL sets of documents with `facts` (bench/sets/)")
    parser.add_argument("--url", help="a running server's URL (default: a fresh one)")
    args = parser.parse_args(argv)
    if args.url:
        print(json.dumps(read(args.url, args.sets), indent=1))
        return
    from core.settings import Settings

    with running_server(Settings().models_dir) as url:
        print(json.dumps(read(url, args.sets), indent=1))
