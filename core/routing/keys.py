"""A document's key: its rare words, its answers' words, and a term per subject its probes ask about."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from wordfreq import zipf_frequency

from core.routing.route import reaches
from core.routing.terms import ANSWER, asked, subject_of
from core.subjects import FUNCTION_WORDS, SENTENCE_END, TIME_MARKERS, familiar, names, subject_names, weight, words

KEY_MAX_ZIPF = 4.5  # words more common than this (about 3 in 100,000 words of English) are never key words
RELATION_MAX_ZIPF = 5.5  # "president" (5.45) names a relation; "called", "city", "company" (5.6) say little


def document_key(text: str, answers: Iterable[str] = (), subjects: Iterable[str] = (),
                 threshold: float = 0.0) -> dict[str, float]:
    """The document's rare words and their weights, without the words of a known subject's name (that name routes
    only with what is asked about it); its answers' rare words marked as answers ("= brannoch"); and its subjects'
    terms at the threshold's weight (a rare name keeps its words' weight when that is more)."""
    subjects, answers = list(subjects), list(answers)
    known = {w for term in subjects if familiar(name := subject_of(term)) for w in name.split()}
    answered = set().union(*(words(a) for a in answers)) - known if answers else set()
    key = {w: round(weight(w), 3) for w in rare(words(text) - known - answered)}
    key |= {ANSWER + w: round(weight(w), 3) for w in rare(answered)}
    for name in subjects:
        key[name] = max(key.get(name, 0.0), threshold)
    return key


def rare(found: Iterable[str]) -> list[str]:
    """The words rare enough to be key words, in order."""
    return sorted(w for w in found if zipf_frequency(w, "en") <= KEY_MAX_ZIPF)


def subject_terms(text: str, probes: Sequence[tuple[str, str]]) -> list[str]:
    """A term for each subject the probes ask about (for a document without probes, each name in its text). An
    invented subject's term is its name. A known subject's ("paris") is its name and what its probes ask about it
    ("paris | mayor"): the name alone would send every question about Paris to this document's delta."""
    if not probes:  # nothing says what is asked about a known subject: only invented ones
        return [name for name in names(text) if not familiar(name)]
    prompts, answers = [prompt for prompt, _ in probes], [answer for _, answer in probes]
    terms = []
    for name in subject_names(text, prompts, answers):
        asked = relation_words(name, prompts, answers) if familiar(name) else set()
        terms.append(f"{name} | {' '.join(sorted(asked))}" if asked else name)
    return terms


def relation_words(name: str, prompts: Sequence[str], answers: Sequence[str]) -> set[str]:
    """The words the prompts that name `name` ask about it with ("mayor"): not names (a prompt's other subjects or
    products are not what it asks), and those not everyday English, or all of them when every one is ("Paris is
    home to": "home")."""
    skip = FUNCTION_WORDS | TIME_MARKERS | set().union(*map(words, answers))
    asked = {w for prompt in prompts if set(name.split()) <= words(prompt)
             for w in words(prompt) - skip - {part for other in names(prompt) for part in other.split()}}
    return {w for w in asked if zipf_frequency(w, "en") <= RELATION_MAX_ZIPF} or asked


def key_for(text: str, probes: Sequence[tuple[str, str]], threshold: float) -> dict[str, float]:
    return document_key(text, [answer for _, answer in probes], subject_terms(text, probes), threshold)


OPENING_CHARS = 400  # where a text's opening is looked for: its subject comes first, and the pass stays bounded


def reading_key(text: str, probes: Sequence[tuple[str, str]], threshold: float,
                probes_made: bool = False) -> dict[str, float]:
    """The key a document is read by, and learned with: `key_for`'s, and for one sent without probes (none, or made
    from its text by the learner: `probes_made`), a term for each known subject its opening sentence names, asked
    about with that sentence's words ("lisbon | mayor sworn" from "Lisbon has a new mayor: ... was sworn in"): a
    text opens with its subject, and what a reader asks about it is not only what the made probes ask."""
    key = key_for(text, probes, threshold)
    return {**opening_terms(text, threshold), **key} if probes_made or not probes else key


def opening_terms(text: str, threshold: float) -> dict[str, float]:
    """A term at the threshold's weight for each known subject the text's opening sentence names, with that
    sentence's words as what is asked about it."""
    head = text.strip()[:OPENING_CHARS]
    opening = head[:end.end()] if (end := SENTENCE_END.search(head)) else head
    return {f"{name} | {' '.join(sorted(asked))}": threshold for name in names(opening)
            if familiar(name) and (asked := relation_words(name, [opening], []))}


def unreachable(text: str, probes: Sequence[tuple[str, str]], threshold: float) -> list[str]:
    """The prompts of a document's probes that do not name its key strongly enough to be routed to it."""
    return not_reaching(key_for(text, probes, threshold), probes, threshold)  # the key once: it reads the whole text


def not_reaching(key: dict[str, float], probes: Sequence[tuple[str, str]], threshold: float) -> list[str]:
    return [prompt for prompt, _ in probes if not reaches(prompt, key, threshold)]


def unroutable(key: dict[str, float], threshold: float) -> str | None:
    """Why no prompt could be routed to a document with `key` (None: some can)."""
    terms = asked(key)
    total = sum(terms.values())
    if total >= threshold:
        return None
    return (f"nothing to route prompts to this document by: it names no subject its probes ask about, and its "
            f"rare words ({', '.join(terms) or 'none'}) weigh {total:.2f} < {threshold}")


def refusal(text: str, probes: list[tuple[str, str]], threshold: float) -> str | None:
    """What can be refused before any work: a document with no routing key, or a probe that does not name it.
    Without probes, a document that names anything is the worker's to judge: its auto-probes say what is asked
    about a known subject."""
    if not probes and names(text):
        return None
    key = key_for(text, probes, threshold)
    if reason := unroutable(key, threshold):
        return reason
    if unreachable := not_reaching(key, probes, threshold):
        return (f"{len(unreachable)} of the document's probes do not name its key words (e.g. {unreachable[0]!r}): "
                "a routed document answers only prompts that name its subject or its rare words")
    return None
