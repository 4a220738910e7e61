"""A cloze asked the way a reader asks it, in the service's question format ("Question: ...?\nAnswer:"): pure
functions over its words.

A model taught "X is managed by -> Ansa Velt" and the echo "Question: X is managed by who?" still misses "Question:
Who manages X?": a small model answers a question in the words it was taught, so each cloze is taught as the
question a reader types. The question word follows the answer (a name: "Who" or "What"; a year or a date: "When"; a
name after "in", "on" or "at": "Where"; a count: "How many <unit>"), and the verb is turned back to the active where
the cloze is passive; a verb's forms come from lemminflect's English tables.
"""
from __future__ import annotations

import re

from lemminflect import getInflection, getLemma

from workers.about import person
from workers.roles import agent_noun

THE_ROLE = re.compile(r"^The (?P<role>.+(?: of |['’]s ).+) (?P<verb>is|was|are|were)$")  # "The founder of X is"
AUX = r"is|are|was|were|has been|have been|had been|will be"
# "X is managed by", "X was designed by the": the doer asked for.
# "X was founded in 1911 by"; never across a second clause ("founded by A and is managed by").
PASSIVE_BY = re.compile(rf"^(?P<subject>.+?) (?P<aux>{AUX}) (?:(?P<adverb>[a-z]+ly) )?(?P<done>[a-z]+)"
                        r"(?P<rest>(?: (?!(?:by|and|or|but|is|are|was|were|has|have|had|will)\b)[^ ,;:]+){0,8}?)"
                        r" by(?: the)?$")
# "X was founded in", "X is located in", "X will be completed by the end of": when or where it was done.
PASSIVE_PLACE = re.compile(rf"^(?P<subject>.+?) (?P<aux>{AUX}) (?P<done>[a-z]+)(?P<rest>(?: [a-z]+){{0,3}}?) "
                           r"(?P<prep>in|on|at)$")
# "So far the foundry", "In 1911 the company": the words before "the" left out of a question.
COPULA_PLACE = re.compile(r"^(?P<subject>.+?) (?P<aux>is|are|was|were) (?:in|at)$")  # "X's headquarters are in"
OPENED = re.compile(r"^(?!The |An? )[A-Z][a-z]*(?: [a-z0-9]+)*? (?P<subject>the .+)$")
# A count asked after the verb: "X seats only" -> "84 people".
# Roles of a deed done once, which a past passive gives as much as a present one: "X was written by" -> its author.
ONCE = {"founder", "author", "designer", "builder", "inventor", "discoverer", "composer", "painter", "publisher"}
FORMER = {"formerly", "previously", "once", "until", "till"}
HEDGES = {"only", "some", "about", "around", "roughly", "nearly", "almost", "over", "up to", "more than"}
MODALS = {"will", "would", "can", "could", "may", "might", "shall", "should", "must"}
MAX_SUBJECT = 8  # words: a longer head of a cloze is a clause, not a subject a question is built around
VERBS = {"is", "are", "was", "were", "be", "been", "has", "have", "had", "do", "does", "did", "says", "said"} | MODALS
NEGATIONS = {"not", "never", "no", "hardly"}
PREPOSITIONS = {"in", "since", "under", "after", "before", "by", "during", "on", "at", "for", "from", "with", "until",
                "over", "across", "through", "despite"}
# Words that open a subject and are lowercase inside a question: "Its headquarters", "She".
LOWERED = {"the", "a", "an", "its", "his", "her", "their", "our", "this", "that", "these", "those", "every", "each",
           "both", "several", "some", "many", "she", "he", "they", "it", "we"}
SCALES = {"thousand", "million", "billion", "trillion"}
CURRENCY = {"$": "dollars", "€": "euros", "£": "pounds"}
CLAUSES = {"who", "which", "that", "whose", "whom", "where", "when", "while", "because", "although"}
YEAR = re.compile(r"^\d{4}$")
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
MONEY = {"euros", "dollars", "pounds", "francs", "kronor", "krone", "yen", "yuan", "rupees", "pesos", "euro", "dollar",
         "usd", "eur", "gbp"}
SEASONS = {"spring", "summer", "autumn", "fall", "winter"}


def as_question(prompt: str, answer: str) -> str | None:
    """ "The founder of X is" -> "Question: Who is the founder of X?\nAnswer:"; "X is managed by" -> "Question: Who
    manages X?\nAnswer:"; "X was founded in" (a year) -> "Question: When was X founded?\nAnswer:"; "X employs" (a
    count) -> "Question: How many people does X employ?\nAnswer:"; any other cloze as an echo question ("X lies
    on the slopes of" -> "Question: X lies on the slopes of what?\nAnswer:"). None for a prompt that is a question
    already."""
    prompt = " ".join(prompt.split())
    if prompt.startswith("Question:"):
        return None
    asked = wh_question(prompt, answer) or echo_question(prompt, answer)
    return f"Question: {asked}\nAnswer:"


def wh_question(prompt: str, answer: str) -> str | None:
    """The question a reader asks for the answer, the cloze's words moved around its question word; None where the
    cloze's shape is none of those known."""
    kind = answer_kind(answer)
    who = "Who" if kind == "name" and person(answer) else "What"
    if match := THE_ROLE.match(prompt):
        return f"{who} {match['verb']} the {match['role']}?"
    if (match := PASSIVE_BY.match(prompt)) and kind == "name" and plain(match["subject"]) \
            and (verb := active_form(match["done"], match["aux"])):
        return f"{who} {verb} {lowered(match['subject'])}{match['rest']}?"
    if (match := PASSIVE_PLACE.match(prompt)) and kind in ("date", "name") and participle(match["done"]) \
            and plain(match["subject"]):
        first, _, rest = match["aux"].partition(" ")  # "will be": "When will X be completed?"
        wh = "When" if kind == "date" else "Where"
        return f"{wh} {first} {lowered(match['subject'])}{' ' + rest if rest else ''} {match['done']}{match['rest']}?"
    if (match := COPULA_PLACE.match(prompt)) and kind == "name" and plain(match["subject"]):
        return f"Where {match['aux']} {lowered(match['subject'])}?"
    if kind != "other" and (split := active(prompt)) and plain(split[0]) and len(split[2].split()) <= 4:
        subject, asked, rest = split
        if kind == "count":
            hedge = next((h for h in HEDGES if rest == f" {h}" or rest.endswith(f" {h}")), "")
            rest = rest[:len(rest) - len(hedge) - 1] if hedge else rest  # "seats only": "How many people ... seat?"
            how = "How much" if unit(answer) in MONEY else f"How many {unit(answer)}"
            return f"{how} {asked[0]} {lowered(subject)} {asked[1]}{rest}?" if rest.split()[-1:] != ["of"] else None
        if rest.split()[-1:] in (["in"], ["on"], ["at"]):  # "X trains on": "Where does X train?"
            wh = "When" if kind == "date" else "Where"
            return f"{wh} {asked[0]} {lowered(subject)} {asked[1]}{rest.rsplit(' ', 1)[0]}?"
    return None


def as_role(prompt: str, answer: str) -> str | None:
    """A passive cloze whose doer holds a role, asked by the role: "X is managed by" -> "The manager of X is", "X was
    founded by" -> "The founder of X is"; None for any other cloze, and for a role a past passive says was held
    ("X was managed by")."""
    match = PASSIVE_BY.match(" ".join(prompt.split()))
    if not match or answer_kind(answer) != "name" or not plain(match["subject"]) or match["adverb"] \
            or set(match["rest"].split()) & FORMER or not (noun := agent_noun(match["done"])):
        return None
    if match["aux"] not in ("is", "are", "has been", "have been") and noun not in ONCE:
        return None  # "X was managed by": who held the role, not who holds it ("X was founded by": its founder)
    return f"The {noun} of {lowered(match['subject'])} is"


def echo_question(prompt: str, answer: str) -> str:
    """The cloze with its question word after it: "X was founded in which year?"."""
    kind = answer_kind(answer)
    ending = "which year" if YEAR.match(answer) else "how many" if kind == "count" or answer[:1].isdigit() else \
        "who" if kind == "name" and person(answer) else "what"
    return f"{prompt.rstrip(',:;')} {ending}?"


def answer_kind(answer: str) -> str:
    """What an answer is, as far as its words tell: a "date" (a year, or a month with a day or a year), a "count"
    (a number with a unit: "84 people", "$12"), a "name" (capitalised: a person, a place, a thing), else "other"."""
    words = answer.split()
    lowered_words = {w.lower().strip(",") for w in words}
    if YEAR.match(answer) or lowered_words & set(MONTHS) or (lowered_words & SEASONS and any(map(YEAR.match, words))):
        return "date"
    if words and (words[0][:1].isdigit() or words[0][:1] in CURRENCY):
        return "count" if unit(answer) else "other"
    return "name" if answer[:1].isupper() else "other"


def plain(subject: str) -> bool:
    """Whether the words before a cloze's verb are a subject a question can be built around: a few words, no clause
    ("Quenwick Lantern Works's lamps are assembled by hand, and the company", "A specialist who has worked"), not
    opening with a verb's -ing or -ed form ("Expected to", "Covering 310's first bushes") nor with a preposition
    ("In 1911 the company") unless the words before "the" are left out (`lowered`)."""
    words = subject.split()
    opening = words[0].lower() if words else ""
    return 0 < len(words) <= MAX_SUBJECT and not any(w[-1:] in ",;:" or w in VERBS or w in CLAUSES for w in words) \
        and words[-1] != "to" and not (opening.endswith(("ing", "ed")) and lemma(opening)) \
        and (opening not in PREPOSITIONS or bool(OPENED.match(subject)))


def unit(answer: str) -> str | None:
    """A count's unit, the first word after its number: "4,200 kilograms" -> "kilograms", "42 million euros" ->
    "euros", "37 typefaces a year" -> "typefaces", "12 square kilometres" -> "square kilometres", "$12" ->
    "dollars"; None for a bare number."""
    if answer[:1] in CURRENCY:
        return CURRENCY[answer[0]]
    words = [w.lower() for w in answer.split()[1:] if w.lower() not in SCALES]
    if not words or not words[0].isalpha():
        return None
    return " ".join(words[:2]) if words[0] in ("square", "cubic") and len(words) > 1 else words[0]


def lowered(subject: str) -> str:
    """A prompt's opening subject inside a question: "The Quillon Observatory" -> "the Quillon Observatory";
    an opening adverb left out ("So far the foundry" -> "the foundry")."""
    if opened := OPENED.match(subject):
        subject = opened["subject"]
    first, _, rest = subject.partition(" ")
    return f"{first.lower()}{' ' + rest if rest else ''}" if first.lower() in LOWERED else subject


def lemma(word: str) -> str | None:
    """A verb's base form ("managed" -> "manage"); None for a word that is no verb's form."""
    found = getLemma(word, upos="VERB", lemmatize_oov=False)
    return found[0] if found else None


def base_of(word: str, tag: str) -> str | None:
    """A verb's base form where `word` is its form of the Penn tag `tag` ("managed", VBN -> "manage"; "employs",
    VBZ -> "employ"); None for any other word."""
    base = lemma(word)
    return base if base and word in getInflection(base, tag=tag) else None


def participle(word: str) -> bool:
    """Whether a word is a verb's past participle ("managed", "built", "founded")."""
    return base_of(word, "VBN") is not None


def active_form(done: str, aux: str) -> str | None:
    """The active verb for a passive's participle and its tense: ("managed", "is") -> "manages", ("designed", "was")
    -> "designed", ("completed", "will be") -> "will complete"."""
    if not (base := base_of(done, "VBN")):
        return None
    if aux == "will be":
        return f"will {base}"
    if aux in ("has been", "have been"):  # "X has been managed since 2019 by": "Who has managed X since 2019?"
        return f"has {done}"
    tag = "VBD" if aux in ("was", "were", "had been") else "VBZ"
    forms = getInflection(base, tag=tag)
    return forms[0] if forms else None


def active(prompt: str) -> tuple[str, tuple[str, str], str] | None:
    """A cloze split at its first verb, asked with "do" or "have": "X employs" -> ("X", ("does", "employ"), ""),
    "So far X has released" -> ("So far X", ("has", "released"), ""), "X opened its doors in" -> ("X", ("did",
    "open"), " its doors in"); None where none of its first words after the first is a present or past form of a
    verb, where the verb is negated, or where another verb follows it."""
    words = prompt.split()
    for i in range(1, min(len(words), MAX_SUBJECT + 1)):
        word, after = words[i], words[i + 1] if i + 1 < len(words) else ""
        if after in NEGATIONS:
            return None
        asked = None
        if word in MODALS and after and lemma(after) == after:  # "will cost"
            asked, skip = (word, after), 2
        elif word in ("has", "have", "had") and after and participle(after):
            asked, skip = (word, after), 2
        elif word in ("has", "have", "had"):
            asked, skip = ("does" if word == "has" else "do" if word == "have" else "did", "have"), 1
        elif word in ("does", "do", "did") and after and lemma(after) == after:  # "X does employ"
            asked, skip = (word, after), 2
        elif word.islower() and word not in VERBS and after != "by" and not noun_position(words[i - 1]):
            for tag, do in (("VBZ", "does"), ("VBD", "did")):  # "the bell cast by X weighs": "cast" is a participle
                if (base := base_of(word, tag)) and base != "be":
                    asked, skip = (do, base), 1
                    break
        if asked:
            rest = words[i + skip:]
            if any(w in VERBS or w in CLAUSES for w in rest):
                return None  # a second clause after the verb
            return " ".join(words[:i]), asked, "".join(f" {w}" for w in rest)
    return None


def noun_position(before: str) -> bool:
    """Whether the word after `before` is a noun's place, not a verb's: after a determiner or a possessive ("The
    waters reach", "the company's headquarters are")."""
    return before.lower() in LOWERED or before.endswith(("'s", "’s"))
