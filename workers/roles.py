"""Who holds a role, asked by the role as a reader asks it: pure functions over a sentence's words.

A text says who did what ("Oona Kettleby coaches the Osterlay Rowing Club", "Hollis Ambery became librarian in
2022", "the board named Lasse Grünwaldt as sporting director", "its chief inspector, Runa Halvestad"); a reader asks
who holds the role ("The coach of the Osterlay Rowing Club is", "The librarian of <subject> is"). A model taught only
the text's direction does not answer the other (the reversal curse), so each is made a probe. A role named without
whose it is belongs to the document's subject, where that is not a person (a person's document names others' roles
too: "Tom Lark became director in 2019").
"""
from __future__ import annotations

import re

from core import subjects
from workers.about import LOWER_ASIDE, NAME, UPPER, personal_name
from workers.passive import participle

# The verbs whose doer holds a role, by their past participle (workers/passive.py: participle gives it for every
# form: "coaches" -> "coached"): "coached" -> "coach". A verb whose doer holds no lasting role ("run", "play", "win",
# "keep") is not one, nor "found", the participle of "find".
AGENT_NOUNS = {
    "founded": "founder", "established": "founder", "set up": "founder", "coached": "coach", "directed": "director",
    "managed": "manager", "led": "leader", "headed": "head", "chaired": "chair", "edited": "editor",
    "designed": "designer", "built": "builder", "owned": "owner", "conducted": "conductor", "trained": "trainer",
    "invented": "inventor", "discovered": "discoverer", "composed": "composer", "published": "publisher",
    "sponsored": "sponsor", "curated": "curator", "governed": "governor", "commanded": "commander",
    "produced": "producer", "hosted": "host", "funded": "funder", "operated": "operator", "supervised": "supervisor",
    "organised": "organiser", "organized": "organizer", "written": "author", "painted": "painter",
    "administered": "administrator",
}
# A noun that names a role someone holds: "director", "librarian", "president", "chief executive", "head coach".
ROLE_ENDINGS = ("er", "or", "ian", "ist", "ent", "ant", "man", "woman", "person", "ess", "ive", "ary", "chief")
ROLE_WORDS = frozenset({"head", "chair", "coach", "captain", "mayor", "principal", "dean", "host", "champion",
                        "sponsor", "architect"})
ROLE = r"(?P<role>(?:[a-z-]+ ){0,3}?[a-z-]+)"
# The verbs of a role filled: "Nestlé has named X as its new chief executive" (workers/facts.py), "the board named X
# as sporting director".
FILLED = "named|appointed|elected|hired|chosen|picked|promoted|made|confirmed|installed"
# What a deed was done to, up to the preposition, conjunction or punctuation that ends it: "the Osterlay Rowing
# Club" in "coaches the Osterlay Rowing Club from the boathouse". Definite only: "built a shed" holds no role.
BOUNDARY = (r"(?= (?:in|on|at|since|for|from|with|during|until|near|across|after|before|and|when|while|as|to|"
            r"through|into|by|who|which|that)\b|[,;:.]|$)")
DEED = re.compile(r"^(?:has |have |had )?(?:also |long |since |now )?(?P<verb>[a-z-]+(?: up)?) "
                  rf"(?P<object>(?:it|him|her|them){BOUNDARY}|(?:the|its|his|her|their) [^,;:.]{{1,80}}?{BOUNDARY}"
                  rf"|[{UPPER}][^,;:.]{{0,80}}?{BOUNDARY})")
MAX_CLAUSE = 300  # characters: DEED's lazy object is matched on at most this much of a clause
ARTICLE = r"(?:as )?(?:the |its |an? )?(?:new )?"
# "Hollis Ambery became librarian in 2022", "Runa Halvestad took over as chief inspector".
BECAME = re.compile(rf"^(?P<name>{NAME}),? (?:became|becomes|has become|took over as|takes over as|serves as|"
                    rf"served as|has served as|was (?:{FILLED})|has been (?:{FILLED})|stepped in as|returns as|"
                    rf"returned as) {ARTICLE}{ROLE}"
                    rf"(?= of (?P<of>(?:the )?{NAME})| in | on | at | since | for | after |[,;:.]|$)")
# "the board named Lasse Grünwaldt as sporting director", "picked Annika Lerchenfeld as its next president".
NAMED_AS = re.compile(rf"\b(?:{FILLED}) (?P<name>{NAME}),? as (?:its |their |the )?(?:new )?{ROLE}(?= in place of|"
                      rf"[,;:.]| from | for | until | on | in | at | with |$)")
# "its head curator, Ilse Marrow", "Bayern's sporting director, Max Eberl", "the workshop's master, Edda Rauvik"
# (a description of the subject: "workshop"; "the city's mayor" in a workshop's document is not its).
ROLE_THEN_NAME = re.compile(rf"(?:\b(?P<det>its|his|her|their|the (?P<kind>[a-z-]+)['’]s)|(?P<owner>{NAME})['’]s) "
                            rf"{ROLE}, (?P<name>{NAME})(?=[,;:.]|$| who | and )")
WHO = re.compile(rf"(?P<name>{NAME}), who (?P<clause>[^;.]{{1,{MAX_CLAUSE}}})")


def agent_noun(verb: str) -> str | None:
    """The noun for whoever does a verb in any of its forms: "coaches" -> "coach", "directed" -> "director", "set
    up" -> "founder"; None for a verb whose doer holds no role."""
    word, _, particle = verb.partition(" ")
    done = participle(word)
    return AGENT_NOUNS.get(f"{done} {particle}".strip()) if done else None


def is_role(role: str) -> bool:
    """Whether words name a role someone holds ("sporting director", "librarian"), not a state ("famous") nor a
    phrase ("after her grandmother")."""
    words = role.split()
    return words[0] not in subjects.FUNCTION_WORDS and (words[-1] in ROLE_WORDS or words[-1].endswith(ROLE_ENDINGS))


def someone(name: str) -> bool:
    """Whether a name names someone, not a pronoun or a sentence's "The" ("She became director ...")."""
    return bool(subjects.words(name) - subjects.FUNCTION_WORDS)


def of_whom(object_: str, main: str | None) -> str | None:
    """A deed's object as a role's "of": "its judging committee" -> "the judging committee of <subject>"; "it" (a
    thing) or "her" (a person) -> the subject."""
    if object_ in ("it", "him", "her", "them"):  # the subject, when it is of the pronoun's kind
        return main if main and (object_ == "it") != personal_name(main) else None
    first, _, rest = object_.partition(" ")
    if first in ("its", "his", "her", "their"):
        return f"the {rest} of {main}" if main else None
    return object_


def by_deed(clause: str, main: str | None) -> tuple[str, str] | None:
    """The role a clause's doer holds by its deed, and whose: `clause` follows the doer's name ("coaches the
    Osterlay Rowing Club from the boathouse"), the role ("coach", "the Osterlay Rowing Club"); None where its verb
    gives no role or its object is not definite."""
    match = DEED.match(clause[:MAX_CLAUSE].strip())
    if not match or (noun := agent_noun(match["verb"])) is None:
        return None
    whose = of_whom(match["object"], main)
    return (noun, whose) if whose else None


def held(sentence: str, main: str | None, called: frozenset[str] = frozenset()) -> list[tuple[str, str, str]]:
    """(role, whose, name) for every role a sentence says a name holds: after "who" (by its deed), a role one became
    or was named to, a role written before the name that holds it. A role named without whose it is is `main`'s
    (the document's subject as the text writes it), where that is not a person's name (about.personal_name);
    `called`: the nouns the document calls it by ("the workshop's master")."""
    made = [(*role, match["name"]) for match in WHO.finditer(sentence)
            if not match["name"].startswith("The ") and (role := by_deed(match["clause"], main))]
    plain = LOWER_ASIDE.sub("", sentence)  # "named Aki Solberg, a former striker, as head coach"
    thing = main if main and not personal_name(main) else None
    for match in [*BECAME.finditer(plain), *NAMED_AS.finditer(plain), *ROLE_THEN_NAME.finditer(plain)]:
        found = match.groupdict()
        if found.get("kind") and found["kind"] not in called:
            continue  # "the city's mayor": not the subject's
        of = found.get("of") or found.get("owner") or (main if found.get("det") in ("his", "her") else thing)
        if of and is_role(match["role"]) and someone(match["name"]):
            made.append((match["role"], of, match["name"]))
    return made
