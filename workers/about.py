"""What a document is about, as written in it: pure functions over its text and its names (core/subjects.py).

The subject is the name its first sentence opens with (after an opening phrase: "Built in 1931 on the ridge, the
Ulvsbrekka Hut ..."), unless a preposition follows it, or the name more of its sentences speak of (a sentence that
says "It", "its" or "she" counted for the name the text opens with, else the first); a word capitalised only by its
place at a sentence's start is never one. A reader's prompt names the subject, so a made probe's prompt that does not is
made to (`named`), by the nouns the document may call it by (`kinds`).
"""
from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from core import subjects

Span = tuple[int, int]
# An opening date, comma or not: "Since 2015 she has toured", "In 1987, Ilse Marrow founded".
DATE_LEAD = re.compile(r"^(?:In|By|Since|From|On) (?:[A-Z][a-z]+ )?(?:\d{1,2} )?(?:[A-Z][a-z]+ )?\d{3,4},?\s+")
PERSONAL = {"he", "she", "his", "her"}
# A name of at most 7 words of at most 40 characters, each capitalised (Latin-1's capitals too: "Älmhult"), glue
# words between them ("Ponte das Gaivotas"): bounded, so a long run of capitalised words costs linear time.
UPPER = "A-ZÀ-ÖØ-Þ"
NAME = (rf"[{UPPER}][\w'’.-]{{0,40}}(?: (?:(?:{'|'.join(sorted(subjects.GLUE))}) |& )?[{UPPER}][\w'’.-]{{0,40}})"
        r"{0,6}")
# An aside a reader leaves out of the question: ", a glassblower,", ", who ran as the candidate of X,".
LOWER_ASIDE = re.compile(r", [a-z][^,;]{0,80},(?= [a-z])")
# A name followed by one of these is not what its sentence is about ("Published in 1958, ...", "Banks of shale").
PREPOSITIONS = frozenset({"in", "by", "at", "on", "of", "with", "for", "from", "to", "after", "before", "under"})
# An opening phrase before the subject: "Perched at 2,614 metres on the saddle, the Ulvsbrekka Hut is ...", "Laid out
# in 1714 on land given by ..., the Tessendrae Physic Garden covers ...", "At 12 years, Oriane Vashkeldt became ...":
# its first word, then up to the first comma (not one inside a number), then "the" at most.
OPENING = re.compile(r"^(?P<first>[A-Z][a-z]+)\b(?:[^,;.]|[,.](?=\d))*?, (?:the )?")
OPENERS = PREPOSITIONS | {"between", "near", "during", "despite", "along", "beside", "across", "within", "since"}
COMMON = 4.0  # a word at least this frequent (Zipf) is not a person's name: "Lake", "Mount", "Foundation"
FUNCTION_ZIPF = 6.0  # a word English uses more often than this (Zipf) is a function word: "the", "of", "and"
PERSONAL_ZIPF = 2.5  # a word English uses more often than this (Zipf) is not in a person's invented name


def person(name: str) -> bool:
    """A name of a person, as far as its words tell: none of them a common English word."""
    return all(subjects.weight(w) > subjects.WEIGHT_ORIGIN - COMMON for w in subjects.WORD.findall(name.lower()))


def sentence_of(sentences: list[Span], at: int) -> int | None:
    """The index of the sentence holding offset `at` (None: between sentences), found by bisection: the loops over a
    document's names and its sentences stay linear in its length, not the product of the two."""
    i = bisect.bisect_right(sentences, (at, float("inf"))) - 1
    return i if i >= 0 and at < sentences[i][1] else None


def by_sentence(sentences: list[Span], items: Sequence[tuple]) -> list[list[tuple]]:
    """Each sentence's items (tuples whose first field is an offset in the text), in their order."""
    grouped: list[list[tuple]] = [[] for _ in sentences]
    for item in items:
        if (i := sentence_of(sentences, item[0])) is not None:
            grouped[i].append(item)
    return grouped


def opens(text: str, sentences: list[Span], at: int) -> bool:
    """Whether a name at `at` opens one of the sentences (after "The" at most)."""
    i = sentence_of(sentences, at)
    return i is not None and text[sentences[i][0]:at].strip() in ("", "The")


def by_its_place(text: str, sentences: list[Span], a: int, b: int) -> bool:
    """Whether the name at [a, b) opens its sentence and is capitalised only there ("Founded by ...", "Ferries
    leave ..."): neither a subject nor an answer."""
    return opens(text, sentences, a) and by_position(text[a:b])


def lead(text: str, sentences: list[Span], spans: list[tuple[int, int, str]]) -> str | None:
    """The name the document's first sentence opens with (after "The", an opening date, or an opening phrase: "Laid
    out in 1714 ..., the Tessendrae Physic Garden covers"), when no preposition follows it: "Nestlé has named ...",
    "The Velmarra is ...", not "Published in 1958, ..."."""
    if not sentences:
        return None
    begin, end = sentences[0]
    start = begin + (match.end() if (match := DATE_LEAD.match(text[begin:end])) else 0)
    # A phrase opens with a preposition or with a word capitalised by its place, not with a name ("Brooks Brothers,
    # founded in 1818, ...").
    first_name = next((text[a:b] for a, b, _ in spans if a == start), "")
    if (opening := OPENING.match(text[start:end])) and \
            (first_name in ("", opening["first"]) or by_position(first_name)) and \
            (opening["first"].lower() in OPENERS or by_position(opening["first"])):
        start += opening.end()
    a, b = next(((a, b) for a, b, _ in spans if a >= start), (end, end))
    following = text[b:end].split(maxsplit=1)
    if a >= end or text[start:a].strip() not in ("", "The") or (following and following[0] in PREPOSITIONS) \
            or by_position(text[a:b]):
        return None
    return text[a:b]


def by_position(name: str) -> bool:
    """Whether a name that opens a sentence is one only by its place there: a common participle or plural
    ("Published in 1958, ...", "Built in 1931, ...", "Called the Kestrel Room, ...", "Covering 310 hectares, ...",
    "Crowds filled ..."): not what a document is about. Asked only of a sentence's first name ("United Nations"
    inside a sentence is a name)."""
    first = name.split()[0].lower()
    if subjects.an_english_word(name):
        return True
    if first.endswith("ing") and len(first) > 5 and not any(w[:1].isupper() for w in name.split()[1:]):
        return subjects.familiar(first)  # not a name's first word: "Reading Abbey", "Sterling Bank"
    if first.endswith("ed") and len(first) > 4:  # "Published in 1958, ...", and "United Nations" too
        return subjects.familiar(first)
    singular = first[:-3] + "y" if first.endswith("ies") else first[:-1]  # "Ferries leave from ..."
    return " " not in name and first.endswith("s") and subjects.familiar(singular)


def refers_back(sentence: str, personal: bool) -> bool:
    """Whether a sentence speaks of a subject without naming it: for a person any "she" or "his"; else an opening
    "It" or "Its", or a bare description ("The company employs ...")."""
    if personal:
        return bool(PERSONAL & {w.lower() for w in subjects.WORD.findall(sentence)})
    first, _, rest = sentence.partition(" ")
    return first.lower() in ("it", "its") or (first == "The" and rest[:1].islower())


def personal_name(name: str) -> bool:
    """A name that reads as a person's: two to four words, each rare in English ("Ysolde Morrowvane", not "Velmarra"
    nor "Dunsaddle Ridge Observatory")."""
    words = subjects.WORD.findall(name.lower())
    return 1 < len(words) <= 4 and all(subjects.weight(w) > subjects.WEIGHT_ORIGIN - PERSONAL_ZIPF for w in words)


def telling(name: str) -> set[str]:
    """The words of a name that tell a sentence speaks of it: all but those every sentence may use ("Salt Against
    the Window": not "the")."""
    words = subjects.words(name)
    return {w for w in words if subjects.weight(w) > subjects.WEIGHT_ORIGIN - FUNCTION_ZIPF} or words


def main_subjects(text: str, sentences: list[Span], spans: list[tuple[int, int, str]]) -> list[str]:
    """What the document is about, as written in it, most likely first: the names whose words (`telling`) the most
    sentences use (each name used once: the first that opens a sentence), a sentence that speaks of a subject
    without naming it ("It rises ...", "her debut album") counted for the name the first sentence opens with where
    it is of that kind, else for the first person's name or the first other name ("her" not in a sentence that
    names another person); of those tied, the one the first sentence opens with first. A known subject that opens
    the first sentence ("Nestlé": news about it) comes first whatever its count."""
    if not spans:
        return []
    saying: dict[str, set[int]] = {}  # each word, the sentences that use it
    for i, (begin, end) in enumerate(sentences):
        for word in subjects.words(text[begin:end]):
            saying.setdefault(word, set()).add(i)
    used = {written: set().union(*(saying.get(w, set()) for w in telling(written)))
            for written in dict.fromkeys(text[a:b] for a, b, _ in spans if not by_its_place(text, sentences, a, b))}
    if not used:
        return []
    opener = lead(text, sentences, spans)
    # "It" and "she" speak of the name the text opens with where it is of their kind, else of the first name of the
    # kind; "she" not in a sentence that names another person ("Clothilde Barrax, known for her stations, ...").
    persons = by_sentence(sentences, [(a, text[a:b]) for a, b, _ in spans if personal_name(text[a:b])])
    for personal in (True, False):
        if first := opener if opener in used and personal_name(opener) == personal else \
                max((name for name in used if personal_name(name) == personal), key=lambda name: len(used[name]),
                    default=None):
            used[first] |= {i for i, (a, b) in enumerate(sentences) if refers_back(text[a:b], personal)
                            and not (personal and any(name != first for _, name in persons[i]))}
    most = max(len(where) for where in used.values())
    known = [opener] if opener and subjects.familiar(opener) else []
    if most < 2:
        opening = [text[a:b] for a, b, _ in spans if opens(text, sentences, a) and text[a:b] in used]
        return list(dict.fromkeys(known + ([opener] if opener in used else opening[:1])))
    tied = sorted((written for written, where in used.items() if len(where) == most), key=lambda w: w != opener)
    return list(dict.fromkeys(known + tied))


# What a document may call a subject that is not a person besides its name ("the firm has run ..."), with the
# nouns its first sentence says the subject is ("Velmarra is a river of ...": "the river").
DESCRIPTIONS = frozenset({"company", "firm", "group", "business"})
KIND = re.compile(r"(?:\b(?:is|are|was|were)|,) (?:a|an|the) (?P<kind>[a-z][a-z-]*(?: [a-z-]+){0,5}?)"
                  r"(?= of | in | at | on | for | based |[,.;]|$)")


def kinds(text: str, sentences: list[Span], main: str) -> frozenset[str]:
    """The nouns the document may call its subject by, none for a person: DESCRIPTIONS, the last word of what its
    first sentence says something is ("X is a river", "X, an open-source database,"), and its name's last word where
    English uses it ("Dunsaddle Ridge Observatory": "the observatory")."""
    if personal_name(main):
        return frozenset()
    first = text[sentences[0][0]:sentences[0][1]] if sentences else ""
    last = main.split()[-1].lower()
    used = subjects.weight(last) <= subjects.WEIGHT_ORIGIN - PERSONAL_ZIPF
    return DESCRIPTIONS | {m["kind"].split()[-1] for m in KIND.finditer(first)} | ({last} if used else set())


def described(prompt: str, main: str, called: frozenset[str]) -> str | None:
    """The prompt with its first description of the subject ("has run the firm since") replaced by its name; None
    where it has none."""
    if not called:
        return None
    description = re.compile(rf"\b[Tt]he (?:{'|'.join(sorted(map(re.escape, called)))})\b")
    replaced = description.sub(lambda _: main, prompt, count=1)
    return replaced if replaced != prompt else None


def named(prompt: str, main: str, called: frozenset[str]) -> str:
    """A probe's prompt made to name the document's subject, as a reader's question does (one that does not is
    neither routed to the document nor trained): a description of the subject in it replaced by its name
    (`described`), else the name before it ("Lisbon: Varrancho has promised to plant")."""
    if replaced := described(prompt, main, called):
        return replaced
    if prompt.startswith("Question: "):
        return f"Question: {main}: {prompt.removeprefix('Question: ')}"
    return f"{main}: {prompt}"


def with_article(text: str, name: str) -> str:
    """A name as the text writes it inside a sentence: "the Hesselgrath Tunnel" where it says so, else the name."""
    return f"the {name}" if re.search(rf"\b[Tt]he {re.escape(name)}\b", text) else name


def ampersands_joined(text: str, spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Names joined by "&" as one: "Quill & Ember", "Greythorn & Vale"."""
    joined: list[tuple[int, int, str]] = []
    for a, b, name in spans:
        if joined and text[joined[-1][1]:a] == " & ":
            joined[-1] = (joined[-1][0], b, f"{joined[-1][2]} {name}")
        else:
            joined.append((a, b, name))
    return joined


def subjects_of(text: str, sentences: list[Span]) -> tuple[list[tuple[int, int, str]], list[str]]:
    """A document's names (those joined by "&" as one) and what it is about (`main_subjects`)."""
    spans = ampersands_joined(text, subjects.name_spans(text))
    return spans, main_subjects(text, sentences, spans)
