"""`ckl bench text-passes`: the seconds of the auto-probes' passes over a document's text (facts found, the
subjects it names), without the model, on documents at the length limit shaped to be costly: many short
sentences full of names, and one long sentence. They run in the learner and in /documents/preview, holding the GIL,
so their cost must grow with the text's length, not with sentences times names."""
from __future__ import annotations

import argparse
import time

from core import subjects
from workers import examples, facts

LIMIT = 20_000  # CKL_LIMITS_MAX_DOCUMENT_CHARS's default


def documents() -> dict[str, str]:
    return {
        "600 sentences, 2 names each": " ".join(f"Zorvan Quell{i % 97} met Brask Tolm{i % 89}." for i in range(600)),
        "tiny sentences of a name": " ".join(f"Zo Q{i}." for i in range(3000)),
        "one long sentence": "The Zorvath Institute " + " ".join(f"met Quellan Mirodt{i} of Brastova{i}"
                                                                  for i in range(900)),
    }


def main(argv: list[str]) -> None:
    argparse.ArgumentParser(prog="ckl bench text-passes", description=__doc__).parse_args(argv)
    for name, text in documents().items():
        text = text[:LIMIT]
        sentences, spans = examples.sentence_spans(text), subjects.name_spans(text)
        clock = time.perf_counter()
        facts.found(text, sentences, spans, lambda a, b: 0.0)
        examples.document_subjects(text, sentences, spans)
        print(f"{name:<30} {len(text):>6} chars {len(sentences):>5} sentences {len(spans):>5} names "
              f"{time.perf_counter() - clock:>6.2f} s")
