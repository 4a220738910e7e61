"""What a text is about: its words, how rare each is in English, and the names it gives its subjects. Pure functions.

A word's rarity comes from the wordfreq package (Zipf scale: 7.7 for "the", 0 for a word it has never seen), a
background far larger than anything the service could count itself. A name is a run of capitalised words
("Siemens", "Harvard University", "University of Oxford"); a subject the model already knows has a name made of
common words ("Paris"), an invented one a rare name ("Vontarex").
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from functools import lru_cache

from wordfreq import zipf_frequency

from core.participles import IRREGULAR

WORD = re.compile(r"[^\W\d_]+")
NAME_TOKEN = re.compile(r"[^\W_][\w'’.-]*")
POSSESSIVE = re.compile(r"['’]s$")
# Capitalised only because a sentence or a title starts with them, or glue inside a name ("University of Oxford").
FUNCTION_WORDS = frozenset("""a an the of in on at for to by from with and or but as is was are were be this that these
those it he she they we i you there here its his her their our my your after before since during now last next every
each some most all what which who whom whose where when why how under over into through across against among
between until while although because if than then so also de la le du des van von der den di da das dos del""".split())
GLUE = frozenset({"of", "de", "la", "le", "du", "des", "van", "von", "der", "den", "di", "da", "das", "dos", "del",
                  "the"})
CALENDAR = frozenset("""january february march april may june july august september october november december
monday tuesday wednesday thursday friday saturday sunday today yesterday tomorrow""".split())
# "The chief executive of X is now" asks what "The chief executive of X is" asks (lower case: "New York" is a name).
TIME_MARKERS = frozenset({"now", "new", "currently", "still", "today"})
# A match starts only where a run of blanks starts: tried at every blank of a long run, the pattern backtracked over
# the rest of the run each time (3.6 s for a document of 20,000 spaces, holding the GIL).
TIME_MARKER = re.compile(r"(?<![ \t])[ \t]+(?:%s)(?=[\s.,;:!?)]|$)" % "|".join(sorted(TIME_MARKERS)))
SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")  # a sentence's end, or a line's (a headline's)
WEIGHT_ORIGIN = 5.0  # a rare word weighs WEIGHT_ORIGIN - its Zipf frequency
STEM = 6  # the letters `stems` keeps
FAMILIAR_RARITY = 2.0  # a name whose words weigh less than this together is one English uses: a known subject
SENTENCE_WORD_ZIPF = 5.5  # a word this common that opens a sentence is an English word there ("Only", "Once")
LOOK_BACK = 40  # characters looked at before a name to tell whether it opens a sentence: the pass stays linear


def words(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text)}


@lru_cache(maxsize=65536)
def weight(word: str) -> float:
    """How much a word says about which subject a text is about: 5 for a word English never uses, 0 at Zipf 5
    (about "water"; "paris" weighs 0.18), negative for more common words."""
    return WEIGHT_ORIGIN - zipf_frequency(word, "en")


def rarity(name: str) -> float:
    """A name's words' weights added up (the common ones count 0)."""
    return sum(max(weight(w), 0.0) for w in name.split())


def stems(ws: Iterable[str]) -> set[str]:
    """Words by their first letters, so a relation asked in another form still matches: "headquarters" and
    "headquartered", "founder" and "founded"."""
    return {w[:STEM] for w in ws}


def without_time_markers(prompt: str) -> str:
    """The question a news prompt asks: "The chief executive of X is now" -> "The chief executive of X is"."""
    return " ".join(w for w in prompt.split() if w not in TIME_MARKERS)


def text_without_time_markers(text: str, asked: Iterable[str] = ()) -> str:
    """A news document's text as the state it describes: "The mayor of X is now Y." -> "The mayor of X is Y."
    What is trained is the fact, which a question asks without the markers ("X is led by its mayor," -> "Y",
    not "now Y"). A marker its probes ask with (`asked`: "the maker of the new product is") is part of what is
    asked and stays; so do spacing, punctuation and a marker glued to another word ("now-famous")."""
    kept = set().union(*(prompt.split() for prompt in asked)) & TIME_MARKERS
    return TIME_MARKER.sub(lambda m: m.group() if m.group().strip() in kept else "", text)


def familiar(name: str) -> bool:
    return rarity(name) < FAMILIAR_RARITY


def names(text: str) -> list[str]:
    """The names in a text, each as its lower-case content words joined by spaces, in order of first use; not a word
    capitalised only because it opens a sentence ("Founded by the surveyor ...", "Only 700 people ...")."""
    return list(dict.fromkeys(name for a, b, name in name_spans(text)
                              if not (opens_sentence(text, a) and an_english_word(text[a:b]))))


def a_participle(word: str) -> bool:
    """ "Built", "Founded", "Perched": a past participle English uses (not "Boeing", nor "Ned")."""
    word = word.lower()
    return IRREGULAR.get(word) == word or (word.endswith("ed") and len(word) > 4 and familiar(word))


def opens_sentence(text: str, at: int) -> bool:
    """Whether offset `at` is where a sentence, a line or what follows a colon starts (the text's start counts): a
    made probe that names its subject before the sentence it asks with reads "Tessendrae Physic Garden: Laid out in"."""
    before = text[max(0, at - LOOK_BACK):at]
    kept = before.rstrip()
    return not kept or kept[-1] in ".!?:" or "\n" in before[len(kept):]


def an_english_word(name: str) -> bool:
    """Whether a name is a past participle or a very common word ("Built", "Founded", "Only", "Many"): never a name
    where it opens a sentence. Not a word in capitals ("US"), nor one that only ends like a participle ("Boeing")."""
    first = name.split()[0].lower()
    if " " not in name and a_participle(first):
        return True
    return len(WORD.findall(name)) == 1 and not name.isupper() and first not in FUNCTION_WORDS \
        and zipf_frequency(first, "en") >= SENTENCE_WORD_ZIPF


def name_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of each name in the text: a run of capitalised tokens, glue words allowed between two
    of them ("University of Oxford"), ended by punctuation; the name is its lower-case content words (a run of
    only function words or dates, such as a sentence's "The" or "In March", is none)."""
    spans, run = [], []
    tokens = list(NAME_TOKEN.finditer(text))

    def close() -> None:
        content = [w.lower() for m in run for w in WORD.findall(bare(m))]
        content = [w for w in content if w not in FUNCTION_WORDS and w not in CALENDAR]
        # A name starts at a capitalised word; a run with none ("5 October 2004.Home": a date, a token glued to the
        # next sentence's first word) names nothing.
        if content and (first := next((m for m in run if capitalised(bare(m))
                                       and bare(m).lower() not in FUNCTION_WORDS | CALENDAR), None)):
            spans.append((first.start(), run[-1].start() + len(bare(run[-1])), " ".join(content)))
        run.clear()

    for i, match in enumerate(tokens):
        token = bare(match)
        if i and text[tokens[i - 1].end():match.start()].strip():
            close()  # a comma between two names: two names
        following = bare(tokens[i + 1]) if i + 1 < len(tokens) else ""
        glue = token.lower() in GLUE and capitalised(following)
        if capitalised(token) or (run and (token[:1].isdigit() or glue)):
            run.append(match)
        else:
            close()
        if match.group().endswith("."):  # a full stop ends a name
            close()
    close()
    return spans


def capitalised(token: str) -> bool:
    """A name's word: "Paris", and "iPhone" too."""
    return token[:1].isupper() or token[1:2].isupper()


def bare(match: re.Match) -> str:
    """A token without its trailing full stop, apostrophe or possessive."""
    return POSSESSIVE.sub("", match.group().rstrip(".'’-"))


def subject_names(text: str, prompts: Iterable[str], answers: Iterable[str] = ()) -> list[str]:
    """The names the prompts ask about that the text also uses: the document's subjects. A name made only of an
    answer's words is what a probe asks for, not what it asks about."""
    text_words = words(text)
    answer_words = set().union(*(words(a) for a in answers)) if answers else set()
    found: list[str] = []
    for prompt in prompts:
        for name in names(prompt):
            parts = set(name.split())
            if parts <= text_words and not parts <= answer_words and name not in found:
                found.append(name)
    return found


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Each sentence's character range, without the spaces around it."""
    bounds = [0, *(m.end() for m in SENTENCE_END.finditer(text)), len(text)]
    spans = []
    for begin, end in itertools.pairwise(bounds):
        chunk = text[begin:end]
        if chunk.strip():
            lead = len(chunk) - len(chunk.lstrip())
            spans.append((begin + lead, begin + len(chunk.rstrip())))
    return spans
