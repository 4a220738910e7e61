"""The facts a reader would ask a document about, as cloze probes: pure functions over its text.

One probe per fact-bearing clause, not one per sentence: every name and number a sentence gives about its subject is
an answer, asked by the sentence up to it ("Tolvane Robotics employs" -> "340 people"). The shapes a reader asks
the other way round from how the text puts them are turned:
- a sentence that opens with its answer's date ("In 1987, Ilse Marrow founded Tolvane Robotics.") is asked with
  the date last ("Ilse Marrow founded Tolvane Robotics in" -> "1987");
- a name that a sentence says is someone's role ("Ilse Marrow is the founder of Tolvane Robotics.", "Ilse Marrow,
  its founder, ...") is asked by the role ("The founder of Tolvane Robotics is" -> "Ilse Marrow");
- a name a sentence opens with (not the document's subject) is asked by a question about the rest of it ("Ilse
  Marrow, a chemist, founded Tolvane Robotics in 1987." -> "Question: Who founded Tolvane Robotics in 1987?\nAnswer:"
  -> "Ilse Marrow"), which names the subject where the rest does not, and where its verb turns, by the sentence
  turned ("Tolvane Robotics was founded in 1987 by": workers/passive.py);
- a sentence that opens with a pronoun is asked about the document's subject ("It employs" -> "Tolvane Robotics
  employs");
- a sentence that opens with a participle's phrase is asked of the name after it ("Founded by Ilse Marrow in 1987,
  Tolvane Robotics builds drones." -> "Tolvane Robotics was founded by" -> "Ilse Marrow").
"""
from __future__ import annotations

import re
from collections.abc import Callable

from core import subjects
from workers.about import (
    DATE_LEAD,
    LOWER_ASIDE,
    NAME,
    OPENING,
    PERSONAL,
    ampersands_joined,
    by_its_place,
    by_position,
    by_sentence,
    described,
    kinds,
    main_subjects,
    person,
    with_article,
)
from workers.passive import passive
from workers.roles import FILLED, by_deed, held

Span = tuple[int, int]
# A number with what it counts: "1987", "340 people", "212 kilometres", "£61 million", "4.5 per cent".
QUANTITY = re.compile(r"[£$€]?\b\d[\d,.]*\d\b(?: (?:million|billion|thousand|hundred))?(?: (?:per cent|[a-z]{3,12}))?"
                      r"|[£$€]?\b\d\b(?: [a-z]{3,12})?")
OPENING_DATE = re.compile(r"^(?:In|By|Since|From|On) ((?:[A-Z][a-z]+ )?(?:\d{1,2} )?(?:[A-Z][a-z]+ )?\d{3,4}),\s*")
PRONOUNS = {"it": "", "he": "", "she": "", "they": "", "its": "'s", "his": "'s", "her": "'s", "their": "'s"}
COPULA = r"(?P<verb>is|was|has been|became|remains|serves as|served as)"
ROLE = (r"(?P<det>the|its|his|her|their) (?P<role>(?:[a-z-]+ ){0,3}[a-z-]+)"
        r"(?: (?P<prep>of|for|at) (?P<of>[A-Z][^,.;]*))?")
# "<Name> is the founder of <Name>." / "<Name> is its founder."
ROLE_SENTENCE = re.compile(rf"^(?P<name>[A-Z][^,.;]*?) {COPULA} {ROLE}[.,;]?$")
# "<Name>, the founder of <Name>, ..." / "<Name>, its founder, ..."
APPOSITION = re.compile(rf"(?P<name>{NAME}), {ROLE},")
# News of a role filled: "Nestlé has named Ilse Marrow as its new chief executive", "Ilse Marrow has been appointed
# principal of the University of Edinburgh", "Lisbon has a new mayor: Ilse Marrow".
ROLE_FILLED = [
    re.compile(rf"(?P<of>{NAME}) (?:has |have |had )?(?:{FILLED}) (?P<name>{NAME}),? (?:as )?(?:its|their|the) "
               rf"(?:new )?(?P<role>(?:[a-z-]+ ){{0,3}}?[a-z-]+)(?=[,.;]| of | for | to | at | on |$)"),
    re.compile(rf"(?P<name>{NAME}) (?:has been|have been|was|were|is|is being) (?:{FILLED}) (?:as )?(?:the )?"
               rf"(?:new )?(?P<role>(?:[a-z-]+ ){{0,3}}?[a-z-]+) (?:of|for|at) (?P<of>(?:the )?{NAME})"),
    re.compile(rf"(?P<name>{NAME}) (?:replaced|succeeded|replaces|succeeds|will (?:replace|succeed)) {NAME} as "
               rf"(?:the |its |their )?(?:new )?(?P<role>(?:[a-z-]+ ){{0,3}}?[a-z-]+) (?:of|at|for) "
               rf"(?P<of>(?:the )?{NAME})"),
    re.compile(rf"(?P<of>{NAME}) (?:has|have) a new (?P<role>(?:[a-z-]+ ){{0,3}}?[a-z-]+): (?P<name>{NAME})"),
]
# A change: the value it had before, which the document says is no longer so ("moved its headquarters from X to Y",
# "replaced X as", "succeeded X as", "in place of X", "formerly X"), and what it is now.
MOVED = re.compile(rf"(?:mov|relocat|chang|switch|renam)(?:ed|es|ing|e) (?P<det>its|their|his|her) (?P<role>"
                   rf"(?:[a-z-]+ ){{0,3}}?[a-z-]+) from (?P<old>{NAME}) to (?P<name>{NAME})")
CHANGED = [re.compile(rf"\bfrom (?P<old>{NAME}) to {NAME}"),
           re.compile(rf"\b(?:replac(?:ed|es|ing)|succeed(?:ed|s|ing)) (?P<old>{NAME})(?= as\b|[,.;]|$)"),
           re.compile(rf"\bin place of (?P<old>{NAME})"),
           re.compile(rf"\b(?:formerly|previously|until now) (?:known as |called |in |at )?(?P<old>{NAME})")]
# "Her uncle, Ferenc Dallowmere, built ...": a role, then who holds it.
OPENING_ROLE = re.compile(rf"^(?P<det>Its|His|Her|Their) (?P<role>(?:[a-z-]+ ){{0,3}}[a-z-]+), (?P<name>{NAME}),")
# After a name that opens a sentence: an aside set off by commas, then what the sentence says of it.
ASIDE = re.compile(r"^,[^,]{1,80},\s*")


def old_values(text: str) -> list[str]:
    """The values a document says something had before it changed: "from Stockholm to Oslo" -> "Stockholm"."""
    return list(dict.fromkeys(m["old"] for pattern in CHANGED for m in pattern.finditer(text)))


def old_value_spans(text: str) -> list[tuple[int, int]]:
    """Where the text names a value it says changed ("moved its headquarters from Stockholm to Oslo", "succeeded
    Ada Lind as"): not a route or a range ("runs from Haldra to Oskelt"), whose ends are facts."""
    spans = [m.span("old") for pattern in (MOVED, *CHANGED[1:]) for m in pattern.finditer(text)]
    return [(a, end if (end := text.find(". ", a, b)) >= 0 else b) for a, b in spans]  # a name ends a sentence


def new_values(text: str) -> dict[str, str]:
    """What a document says a value changed to, by the value it had: "moved its headquarters from Stockholm to
    Oslo." -> {"Stockholm": "Oslo"}."""
    return {m["old"]: m["name"].rstrip(".") for m in MOVED.finditer(text)}


def quantities(text: str, begin: int, end: int) -> list[Span]:
    """The numbers between `begin` and `end`, each with the word that says what it counts (a function word is not
    one: "in 1987 and" gives "1987")."""
    spans = []
    for match in QUANTITY.finditer(text, begin, end):
        a, b = match.span()
        last = text[a:b].split()[-1]
        if len(text[a:b].split()) > 1 and last.lower() in subjects.FUNCTION_WORDS | {"per"}:
            b = a + text[a:b].rindex(" ")
        spans.append((a, b))
    return spans


def about_subject(prompt: str, about: list[str]) -> str | None:
    """The prompt with an opening pronoun, or a description that names nothing ("The company employs"), replaced by
    the document's subject it stands for ("Its staff number" -> "Tolvane Robotics's staff number"; "her" stands for a
    person); None for a pronoun with no subject to stand for."""
    head = ""
    if (lead := DATE_LEAD.match(prompt)) and lead.end() < len(prompt):  # "Since 2015 she has": the pronoun after it
        head, prompt = prompt[:lead.end()], prompt[lead.end():]
    first, _, rest = prompt.partition(" ")
    second, _, after = rest.partition(" ")
    if first == "The" and second.islower() and not any(w[:1].isupper() for w in after.split()):
        first, rest = "it", after  # "The company employs": a description of the subject, named nowhere else in it
    if first.lower() not in PRONOUNS:
        return head + prompt
    personal = first.lower() in PERSONAL
    fitting = [name for name in about if person(name) == personal] or about
    if not fitting:
        return None
    return f"{head}{fitting[0]}{PRONOUNS[first.lower()]} {rest}".strip()


def role_prompt(role: str, of: str | None, verb: str) -> str:
    """The role as asked: "The founder of Tolvane Robotics is" ("was" where the text says it was)."""
    tense = "was" if verb in ("was", "served as") else "is"
    return f"The {role} of {of.rstrip('.')} {tense}" if of else ""  # "of Acme." at a sentence's end


def turned(sentence: str, about: list[str]) -> list[tuple[str, str]]:
    """The probes a sentence gives when asked the other way round: by a role its names hold, by an opening date."""
    made = []

    def whose(match) -> str | None:  # "the founder of X": X; "its founder": the subject "its" stands for
        if match["of"] or match["det"] == "the":
            return match["of"]
        fitting = [name for name in about if person(name) == (match["det"] in ("his", "her"))] or about
        return fitting[0] if fitting else None

    if match := OPENING_ROLE.match(sentence):  # "Her uncle, Ferenc Dallowmere, built": "The uncle of <her> is"
        if prompt := role_prompt(match["role"], whose({"of": None, "det": match["det"].lower()}), "is"):
            made.append((prompt, match["name"]))
    if match := ROLE_SENTENCE.match(sentence):
        if prompt := role_prompt(match["role"], whose(match), match["verb"]):
            made.append((prompt, match["name"]))
    for match in APPOSITION.finditer(sentence):
        if prompt := role_prompt(match["role"], whose(match), "is"):
            made.append((prompt, match["name"]))
    for match in MOVED.finditer(sentence):  # "moved its headquarters from X to Y": "The headquarters of S is" -> Y
        match_of = {"of": None, "det": match["det"], "role": match["role"]}
        if prompt := role_prompt(match["role"], whose(match_of), "is"):
            made.append((prompt, match["name"]))
    plain = LOWER_ASIDE.sub("", sentence)  # "has picked Annika Lerchenfeld, a physicist, as its next president"
    for pattern in ROLE_FILLED:
        made += [(role_prompt(m["role"], m["of"], "is"), m["name"]) for m in pattern.finditer(plain)]
    if match := OPENING_DATE.match(sentence):
        rest = sentence[match.end():].rstrip(".!? ")
        if rest and (prompt := about_subject(rest[:1].upper() + rest[1:], about)):
            made.append((f"{prompt} in", match.group(1)))
    return made


def participle_phrase(text: str, begin: int, end: int, spans: list[tuple[int, int, str]],
                      about: list[str]) -> tuple[int, str] | None:
    """Where a sentence's opening participle phrase ends, and what it is said of, as a prompt asks it: "Founded by
    the surveyor Lidwina Osterkamp in 1889, Brannock Heavy Rail builds ..." -> (the comma's offset, "Brannock Heavy
    Rail was"), so the phrase's facts are asked as a reader asks them ("Brannock Heavy Rail was founded by the
    surveyor" -> "Lidwina Osterkamp"), not by the phrase alone ("Founded by the surveyor"). What it is said of is the
    name after the comma or a pronoun standing for the document's subject, followed by its verb (not "Based in Los
    Angeles, California, he ...": a second part of the phrase)."""
    if not (match := OPENING.match(text[begin:end])) or not subjects.a_participle(match["first"]):
        return None
    at = begin + match.end()
    the = "The " if match.group().endswith("the ") else ""
    if written := next((text[a:b] for a, b, _ in spans if a == at), None):
        said_of = f"{the}{written}"
    else:  # "Designed by the engineer Amalie Sturrock-Venn, it opened to traffic": the document's subject
        written = text[at:end].split(maxsplit=1)[0] if text[at:end].strip() and not the else ""
        said_of = about_subject(written, about) if PRONOUNS.get(written.lower()) == "" else None
    if not said_of or not re.match(r" [a-z]", text[at + len(written):end]):
        return None
    return begin + text[begin:at].rindex(","), f"{said_of} was"


def question(name: str, rest: str, main: str | None) -> str | None:
    """The question whose answer is the name a sentence opens with: "Who" for a person's name (no common word in
    it), else "What"; the rest of the sentence, without an aside after the name; the document's subject before it
    where the rest does not name it."""
    rest = ASIDE.sub("", rest).strip().rstrip(".!?;:").strip()
    if not rest or not rest[:1].islower() or len(rest.split()) < 2:
        return None
    asked = f"{'Who' if person(name) else 'What'} {rest}?"
    if main and not subjects.words(main) & subjects.words(rest):
        asked = f"{main}: {asked[:1].lower()}{asked[1:]}"
    return f"Question: {asked}\nAnswer:"


def found(text: str, sentences: list[Span], spans: list[tuple[int, int, str]], weight: Callable[[int, int], float],
          min_prompt_words: int = 3) -> list[tuple[float, str, str]]:
    """(weight, prompt, answer) for every fact found: each name (not one of the document's subjects) and number a
    sentence gives, asked by the sentence up to it, and the probes its sentences give turned (`turned`)."""
    spans = ampersands_joined(text, spans)
    about = main_subjects(text, sentences, spans)
    main = about[0] if about else None
    subject_words = subjects.words(main) if main else set()  # another name it speaks of is a fact's answer
    called = kinds(text, sentences, main) if main else frozenset()
    written = with_article(text, main) if main else None  # "the Hesselgrath Tunnel"

    def role_asked(role: str, of: str) -> str:  # "The founder of the firm is": the firm by its name
        return role_prompt(role, described(of, written, called) or of, "is")

    olds = {frozenset(subjects.words(old)) for old in old_values(text)}
    names = [(a, b) for a, b, name in spans if not set(name.split()) & subject_words
             and frozenset(subjects.words(text[a:b])) not in olds  # what the document says is no longer so
             and not by_its_place(text, sentences, a, b)]
    made: dict[tuple[str, str], float] = {}
    for (begin, end), its_spans, its_names in zip(sentences, by_sentence(sentences, spans),
                                                  by_sentence(sentences, names)):
        opening = [(a, b) for a, b, name in its_spans if text[begin:a].strip() in ("", "The")
                   and not subject_words & set(name.split()) and not by_position(text[a:b])]
        for a, b in opening:
            if asked := question(text[a:b], text[b:end], main):
                made.setdefault((asked, text[a:b]), weight(a, b))
            by = "by the" if text[begin:a].strip() == "The" else "by"  # "... by the" -> "Sablewood Foundation"
            deed = ASIDE.sub("", text[b:end])
            if back := passive(deed, by):  # "Its committee is chaired by", "The firm has ..."
                prompt = about_subject(back, about) if back.split()[0].lower() in PRONOUNS \
                    else described(back, main, called) or back
                if prompt:
                    made.setdefault((subjects.without_time_markers(prompt), text[a:b]), weight(a, b))
            if role := by_deed(deed, written):  # "Oona Kettleby coaches the club": "The coach of the club is"
                made.setdefault((role_asked(*role), text[a:b]), weight(a, b))
        inside = list(its_names)
        inside += [(a, b) for a, b in quantities(text, begin, end) if not any(x <= a < y for x, y in inside)]
        phrase_end, said_of = participle_phrase(text, begin, end, its_spans, about) or (begin, "")
        for a, b in inside:
            said = text[begin:a].strip()
            if a < phrase_end:  # "Founded by the surveyor" -> "Brannock Heavy Rail was founded by the surveyor"
                said = f"{said_of} {said[:1].lower()}{said[1:]}"
            said = LOWER_ASIDE.sub("", subjects.without_time_markers(said))
            if len(said.split()) >= min_prompt_words and (prompt := about_subject(said, about)):
                made.setdefault((prompt, text[a:b].strip()), weight(a, b))
        roles = [(role_asked(role, of), name) for role, of, name in held(text[begin:end], written, called)]
        for prompt, answer in turned(text[begin:end], about) + roles:
            answer = answer.rstrip(".")  # a name that ends its sentence: "to Malmö."
            if subject_words and subject_words <= subjects.words(answer):
                continue  # the subject is what a prompt names, never an answer: the document's key is its name
            start = text.find(answer, begin, end)
            made.setdefault((subjects.without_time_markers(prompt), answer), weight(start, start + len(answer)))
    return [(w, prompt, answer) for (prompt, answer), w in made.items()]
