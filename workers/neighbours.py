"""Neighbour prompts: what a document about a subject the model already knows must leave as it was. Pure functions.

A document about Siemens teaches one new fact; the prompts about Siemens's other facts ("Siemens is a") must keep
the continuation they had wherever its delta can reach them. Each familiar subject the document's probes ask
about gets a few generic prompts; for those the candidate can move, the learner records their continuations
before training, replays them while training, and the gate checks them (workers/learner.py). An invented subject
("Vontarex") gets none: the model knew nothing about it to keep, and what the document says about it is the point.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from core.routing.terms import subject_of
from core.subjects import FUNCTION_WORDS, familiar, name_spans, stems, subject_names, words

TEMPLATES = ("{} is a", "{} is known for", "{} was founded", "{} is located in", "The history of {}")


def familiar_subjects(text: str, probes: Sequence[tuple[str, str]], key: Iterable[str] = ()) -> list[str]:
    """The subjects the probes ask about, and those the document's key names with what is asked about them ("lisbon
    | mayor": for one sent without probes, its opening's), whose names are common words, as the document writes
    them."""
    asked = subject_names(text, [prompt for prompt, _ in probes], [answer for _, answer in probes])
    asked += [name for term in key if "|" in term and (name := subject_of(term)) not in asked]
    written = {name: text[a:b] for a, b, name in reversed(name_spans(text))}  # the first way the text writes it
    return [written[name] for name in asked if name in written and familiar(name)]


def neighbour_prompts(subjects: Sequence[str], asked: Sequence[str] = ()) -> list[str]:
    """The templates for each subject, less those that ask what the document's own probes (`asked`) ask: "Siemens
    is located in" is no neighbour of a document that moves Siemens."""
    taken = stems(w for prompt in asked for w in words(prompt) - FUNCTION_WORDS)
    return [template.format(subject) for subject in subjects for template in TEMPLATES
            if not stems(words(template) - FUNCTION_WORDS) & taken]
