"""A sentence whose opening name is who did something, turned so that the name comes last: "Sunniva Brockhalt chairs
its judging committee" -> "Its judging committee is chaired by". A reader asks for the doer that way ("The
committee is chaired by", "Since 2019 the firm has been run by"); a model taught only the sentence's direction does
not answer the other (the reversal curse). Pure functions over the words; a verb it cannot turn gives None.
"""
from __future__ import annotations

import re

from core import subjects
from core.participles import IRREGULAR

PAST = {"ran", "led", "built", "made", "won", "held", "bought", "sold", "wrote", "drew", "gave", "found", "kept",
        "paid", "took", "taught", "brought", "began", "chose", "sang", "set", "shot", "spent", "sent", "met", "knew",
        "saw", "left", "put", "stopped", "laid", "lit"}
# Verbs whose object is no thing done to: "remains the largest employer", "told Reuters that ...".
UNTURNED = {"is", "was", "are", "were", "be", "been", "has", "have", "had", "will", "would", "can", "may", "remain",
            "remains", "remained", "become", "becomes", "became", "seem", "seems", "seemed", "appear", "appears",
            "appeared", "stay", "stays", "stayed", "do", "does", "did", "go", "goes", "went", "say", "says", "said",
            "tell", "tells", "told"}
# "has run | the firm | since 2019": what was done, to what, and the rest of the sentence from a preposition on.
CLAUSE = re.compile(r"^(?P<aux>has |have |had )?(?P<verb>[a-z]+) (?P<object>(?:the|its|his|her|their|a|an) [^,;]*?"
                    r"|[A-Z][^,;]*?)(?P<rest>(?: (?:in|on|at|since|for|from|with|during|until|near|across|after|"
                    r"before) [^;]*)?)$")
MAX_CLAUSE = 300  # characters: CLAUSE's lazy object costs square time in its length, so a longer one is not turned


def participle(verb: str) -> str | None:
    """ "chairs" -> "chaired", "manages" -> "managed", "founded" -> "founded", "leads" -> "led"; None for a form
    that is no English word ("leaves" is not "leaved")."""
    if verb in IRREGULAR:
        return IRREGULAR[verb]
    if verb.endswith("ed"):
        made = verb
    elif verb.endswith("ies"):
        made = verb[:-3] + "ied"
    elif verb.endswith(("shes", "ches", "sses", "xes")):
        made = verb[:-2] + "ed"
    elif verb.endswith("s") and not verb.endswith("ss"):
        made = verb[:-1] + ("d" if verb[:-1].endswith("e") else "ed")
    else:
        return None
    return made if subjects.familiar(made) else None


def passive(rest: str, by: str = "by") -> str | None:
    """The prompt that asks for a clause's doer: `rest` is the clause after the doer's name ("has run the firm since
    2019"), the prompt the clause turned ("The firm has been run since 2019 by"); None where its verb is not one
    that turns (an auxiliary, a verb without an object, a clause already passive)."""
    if len(rest) > MAX_CLAUSE:
        return None
    match = CLAUSE.match(rest.strip().rstrip(".!?;:"))
    if not match or match["verb"] in UNTURNED:
        return None
    verb, aux = match["verb"], (match["aux"] or "").strip()
    if (done := participle(verb)) is None:
        return None
    if aux:
        tense = f"{aux if aux != 'have' else 'has'} been"
    elif verb in PAST or verb.endswith("ed"):
        tense = "was"
    elif verb.endswith("s"):
        tense = "is"
    else:
        return None  # "they run": plural doers, left alone
    what = match["object"]
    return f"{what[:1].upper()}{what[1:]} {tense} {done}{match['rest']} {by}"
