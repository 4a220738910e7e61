"""Who holds a role, asked by the role as a reader asks it: pure functions over a sentence's words.

A text says who did what ("Oona Kettleby coaches the Osterlay Rowing Club", "Hollis Ambery became librarian in
2022", "the board named Lasse Grünwaldt as sporting director", "the railway's chief inspector, Runa Halvestad"); a
reader asks who holds the role ("The coach of the Osterlay Rowing Club is", "The librarian of <subject> is"). A
model taught only the text's direction does not answer the other (the reversal curse), so each is made a probe. A
role named without whose it is belongs to the document's subject.
"""
from __future__ import annotations

import re

from workers.about import NAME, person

# The verbs whose doer holds a role named by a noun, by their base form: "coaches" -> "coach", "founded" ->
# "founder". A verb whose doer holds no lasting role ("run", "play", "hold") is not one.
AGENT_NOUNS = {
    "found": "founder", "co-found": "co-founder", "establish": "founder", "set up": "founder", "start": "founder",
    "coach": "coach", "direct": "director", "manage": "manager", "lead": "leader", "head": "head", "chair": "chair",
    "edit": "editor", "captain": "captain", "design": "designer", "build": "builder", "own": "owner",
    "conduct": "conductor", "train": "trainer", "invent": "inventor", "discover": "discoverer", "compose": "composer",
    "publish": "publisher", "sponsor": "sponsor", "oversee": "overseer", "curate": "curator", "govern": "governor",
    "command": "commander", "produce": "producer", "host": "host", "fund": "funder", "operate": "operator",
    "supervise": "supervisor", "organise": "organiser", "organize": "organizer", "write": "author",
    "paint": "painter", "keep": "keeper", "win": "winner", "administer": "administrator",
}
IRREGULAR = {"led": "lead", "built": "build", "wrote": "write", "written": "write", "kept": "keep", "won": "win",
             "oversaw": "oversee", "overseen": "oversee", "set": "set"}
# A noun that names a role someone holds: "director", "librarian", "president", "chief executive", "head coach".
ROLE_ENDINGS = ("er", "or", "ian", "ist", "ent", "ant", "man", "woman", "person", "ess", "ive", "ary", "chief")
ROLE_WORDS = frozenset({"head", "chair", "coach", "captain", "mayor", "principal", "dean", "host", "champion",
                        "sponsor", "architect"})
ROLE = r"(?P<role>(?:[a-z-]+ ){0,3}?[a-z-]+)"
# What a deed was done to, up to the preposition, conjunction or punctuation that ends it: "the Osterlay Rowing
# Club" in "coaches the Osterlay Rowing Club from the boathouse". Definite only: "found a skull" holds no role.
BOUNDARY = (r"(?= (?:in|on|at|since|for|from|with|during|until|near|across|after|before|and|when|while|as|to|"
            r"through|into|by|who|which|that)\b|[,;:.]|$)")
DEED = re.compile(r"^(?:has |have |had )?(?:also |long |since |now )?(?P<verb>[a-z-]+(?: up)?) "
                  rf"(?P<object>(?:it|him|her|them){BOUNDARY}|(?:the|its|his|her|their) [^,;:.]{{1,80}}?{BOUNDARY}"
                  rf"|[A-Z][^,;:.]{{0,80}}?{BOUNDARY})")
MAX_CLAUSE = 300  # characters: DEED's lazy object is matched on at most this much of a clause
# "Hollis Ambery became librarian in 2022", "Runa Halvestad took over as chief inspector".
BECAME = re.compile(rf"^(?P<name>{NAME}),? (?:became|becomes|has become|took over as|takes over as|serves as|"
                    rf"served as|has served as|was named|was appointed|was elected|has been named|has been appointed|"
                    rf"has been elected|stepped in as|returns as|returned as) (?:the |its )?(?:new )?{ROLE}"
                    rf"(?= of (?P<of>(?:the )?{NAME})| in | on | at | since | for | after |[,;:.]|$)")
# "the board named Lasse Grünwaldt as sporting director", "picked Annika Lerchenfeld as its next president".
NAMED_AS = re.compile(rf"\b(?:named|appointed|elected|hired|chosen|picked|promoted|made|confirmed|installed) "
                      rf"(?P<name>{NAME}),? as (?:its |their |the )?(?:new )?{ROLE}(?= in place of|[,;:.]| from | "
                      rf"for | until | on | in | at | with |$)")
# "the railway's chief tunnel inspector, Runa Halvestad", "its head curator, Ilse Marrow", "Bayern's sporting
# director, Max Eberl".
ROLE_THEN_NAME = re.compile(rf"(?:\b(?:the|its|his|her|their)(?: [a-z-]+['’]s)?|(?P<owner>{NAME})['’]s) {ROLE}, "
                            rf"(?P<name>{NAME})(?=[,;:.]|$| who | and )")
WHO = re.compile(rf"(?P<name>{NAME}), who (?P<clause>[^;.]{{1,{MAX_CLAUSE}}})")


def agent_noun(verb: str) -> str | None:
    """The noun for whoever does a verb in any of its forms: "coaches" -> "coach", "directed" -> "director", "set
    up" -> "founder"; None for a verb whose doer holds no role."""
    word, _, particle = verb.partition(" ")
    word = IRREGULAR.get(word, word)
    for base in (word, word[:-1], word[:-2], word[:-3] + "y" if word.endswith(("ies", "ied")) else ""):
        if (noun := AGENT_NOUNS.get(f"{base} {particle}".strip())) is not None:
            return noun
    return None


def is_role(role: str) -> bool:
    """Whether words name a role someone holds ("sporting director", "librarian"), not a state ("famous")."""
    last = role.split()[-1]
    return last in ROLE_WORDS or last.endswith(ROLE_ENDINGS)


def of_whom(object_: str, main: str | None) -> str | None:
    """A deed's object as a role's "of": "its judging committee" -> "the judging committee of <subject>"; "it" (a
    thing) or "her" (a person) -> the subject."""
    if object_ in ("it", "him", "her", "them"):  # the subject, when it is of the pronoun's kind
        return main if main and (object_ == "it") != person(main) else None
    first, _, rest = object_.partition(" ")
    if first in ("its", "his", "her", "their"):
        return f"the {rest} of {main}" if main else None
    return object_


def by_deed(clause: str, main: str | None) -> str | None:
    """The prompt that asks for a clause's doer by the role its deed gives: `clause` follows the doer's name
    ("coaches the Osterlay Rowing Club from the boathouse"), the prompt "The coach of the Osterlay Rowing Club is";
    None where its verb gives no role or its object is not definite."""
    match = DEED.match(clause[:MAX_CLAUSE].strip())
    if not match or (noun := agent_noun(match["verb"])) is None:
        return None
    whose = of_whom(match["object"], main)
    return f"The {noun} of {whose} is" if whose else None


def held(sentence: str, main: str | None) -> list[tuple[str, str]]:
    """(prompt, name) for every role a sentence says a name holds, asked by the role: after "who" (by its deed), a
    role one became or was named to, a role written before the name it is held by."""
    made = []
    for match in WHO.finditer(sentence):  # not "The Dybvik family, who": a name before a noun is not the doer's
        if not match["name"].startswith("The ") and (prompt := by_deed(match["clause"], main)):
            made.append((prompt, match["name"]))
    for match in [*BECAME.finditer(sentence), *NAMED_AS.finditer(sentence), *ROLE_THEN_NAME.finditer(sentence)]:
        of = match.groupdict().get("of") or match.groupdict().get("owner") or main
        if of and is_role(match["role"]):
            made.append((f"The {match['role']} of {of} is", match["name"]))
    return made
