"""The relations a reader asks of any subject, answered by the model with the document before them.

A made probe asks a fact the way its sentence puts it ("Thaddeus Orrimane opened the Velmoreth Bell Foundry there
in"); a reader asks "The Velmoreth Bell Foundry was founded in" or "Where is the Velmoreth Bell Foundry located?".
No rule over one sentence's words finds which of a document's facts answers which of those: the model reading the
whole document does, where it is sure. Each relation below is put after the document; where the model's greedy
continuation opens with one of the document's made answers (and that answer is of the relation's kind), the
relation's cloze and question are probes with that answer. A wrong link would be taught as fact, and with one
person in the text the model names that person for every person's relation; so a link also needs a sentence that
gives the answer to say something of the relation's kind (a founding verb, a design, a role, a place's
preposition), and a name the model gave two person relations is left out of both.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

YEAR = re.compile(r"1[0-9]{3}|20[0-9]{2}")
# A person's or a firm's name: two or more capitalised words, no digits ("Colette Imbrasseur", "Atelier Caramujo").
WHOSE = re.compile(r"(?:[A-Z][\w'’.-]*(?: (?:de|da|van|von|der|la|le))? )+[A-Z][\w'’-]+")
# A place's name: capitalised words, no digits ("Kandlewick", "Port Sellaby").
PLACE = re.compile(r"[A-Z][\w'’-]+(?: [A-Z][\w'’-]+){0,3}")
OPENING_WORDS = 8  # an answer counts only where it opens the continuation (after at most this many words)
TOKEN = re.compile(r"[^\W_]+")  # a word or a number, punctuation left out
CONTEXT_TOKENS = 384  # the document's first tokens put before a relation: a paragraph whole, an article's lead


@dataclass(frozen=True)
class Relation:
    cloze: str  # {s}: the subject as the text writes it ("the Orlen Tower"), {S}: the same opening a sentence
    question: str
    kind: re.Pattern[str]
    person: bool  # answered by someone: one name given two such relations is the model's guess
    cue: re.Pattern[str]  # what a sentence giving the answer says: the relation is of its kind


FOUNDED = re.compile(r"\b(?:found|establish|start|open|set up|sets up|create|launch|built|build|complet)", re.I)
RELATIONS = (
    Relation("The founder of {s} is", "Question: Who founded {s}?\nAnswer:", WHOSE, True, FOUNDED),
    Relation("{S} was founded in", "Question: When was {s} founded?\nAnswer:", YEAR, False, FOUNDED),
    Relation("{S} is located in", "Question: Where is {s} located?\nAnswer:", PLACE, False,
             re.compile(r"\b(?:in|at|on|near|above|below|beside|outside|of) (?:the )?(?:[a-z]+ (?:of )?)?$")),
    Relation("The head of {s} is", "Question: Who leads {s}?\nAnswer:", WHOSE, True,
             re.compile(r"\b(?:head|lead|led|direct|manag|chair|run|ran|chief|president|in charge|captain|coach)",
                        re.I)),
    Relation("{S} was designed by", "Question: Who designed {s}?\nAnswer:", WHOSE, True,
             re.compile(r"\b(?:design|architect)", re.I)),
)


def asked(relation: Relation, written: str) -> tuple[str, str]:
    """The relation's cloze and question about a subject written `written` ("the Skellgarth Observatory")."""
    capital = written[:1].upper() + written[1:]
    return relation.cloze.format(s=written, S=capital), relation.question.format(s=written)


def opening_answer(continuation: str, answers: list[str], kind: re.Pattern[str]) -> str | None:
    """The made answer of `kind` that the continuation names first, within its opening words and first line
    (" the village of Kandlewick, ..." -> "Kandlewick"); None where it names none."""
    line = continuation.strip().split("\n", 1)[0]
    opening = " " + " ".join(TOKEN.findall(line)[:OPENING_WORDS]).lower() + " "
    found = [(opening.find(f" {' '.join(TOKEN.findall(a)).lower()} "), a) for a in answers
             if kind.fullmatch(a) and TOKEN.findall(a)]
    named = [(at, -len(a), a) for at, a in found if at >= 0]
    return min(named)[2] if named else None


def cued(relation: Relation, answer: str, sentences: list[str]) -> bool:
    """Whether a sentence that gives `answer` says something of the relation's kind: a place's cue reads the words
    just before it ("stands above the village of" Aubrenne), the others the whole sentence."""
    for sentence in sentences:
        if (at := sentence.find(answer)) >= 0:
            if relation.cue.search(sentence[:at] if relation.kind is PLACE else sentence):
                return True
    return False


def askable(answers: list[str], sentences: list[str]) -> list[Relation]:
    """The relations some answer could link to (of the relation's kind, given with its cue): only those are put to
    the model (a two-sentence document naming one person is asked one relation, not five)."""
    return [relation for relation in RELATIONS
            if any(relation.kind.fullmatch(a) and cued(relation, a, sentences) for a in answers)]


def linked(relations: list[Relation], continuations: list[str], answers: list[str], written: str,
           sentences: list[str]) -> list[tuple[str, str]]:
    """(prompt, answer) for each relation (one continuation each, in order) whose continuation opens with one of
    `answers` that a sentence of the document (`sentences`) gives with the relation's cue: its cloze and its
    question. A name given two person relations is left out of both."""
    found = [(relation, opening_answer(text, answers, relation.kind)) for relation, text in
             zip(relations, continuations)]
    people = [answer for relation, answer in found if relation.person and answer]
    made = []
    for relation, answer in found:
        if answer and cued(relation, answer, sentences) and not (relation.person and people.count(answer) > 1):
            made += [(prompt, answer) for prompt in asked(relation, written)]
    return made
