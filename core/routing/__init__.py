"""Which documents a prompt is about: a lexical key per document, and a route per prompt. Pure functions, the
framework's: the learner and the server route alike, whatever method a document's delta has.

A document's key has two kinds of terms (core/subjects.py). Its rare words, each weighted by how rare it is
in general English: TF-IDF against a background far larger than anything the service could fit itself. And a
term per subject its probes ask about, weighing the threshold on its own. An invented subject's term is its
name ("vontarex"): a prompt that names it reaches the document. A subject the model already knows has a name
made of common words ("paris"); its term also holds the words its probes ask about it ("paris | mayor"), and a
prompt must name the subject and one of those (by their first letters), so "Paris is the capital of" still runs
the base model. A prompt is routed to every document whose terms it contains with a total weight that reaches
the threshold: several documents about one subject, or a prompt that names two subjects, use their deltas
together. A prompt that reaches none is answered by the base model. An answer's words are in the key as such: a
question about a fact names its subject, not its answer, but it may name a subject by another of its facts ("the
country whose capital is Brannoch"): a prompt that reaches no document by what it is about goes to those whose
answers it names, with the other documents of their subjects.

Why words and not the model's own states: on this model the hidden states and the memory's read slots
at a prompt encode its template, not its subject (docs/decisions.md: "Routing keys on rare words").
"""
from core.routing.index import FLOOR_SLACK, KeyIndex, Keys, answer_words, candidates, in_order
from core.routing.keys import (
    KEY_MAX_ZIPF,
    RELATION_MAX_ZIPF,
    document_key,
    key_for,
    not_reaching,
    rare,
    reading_key,
    refusal,
    relation_words,
    subject_terms,
    unreachable,
    unroutable,
)
from core.routing.route import (
    MAX_ROUTE,
    Watched,
    about,
    changed,
    may_reroute,
    named,
    reached,
    reaches,
    related,
    route,
    watched,
)
from core.routing.terms import (
    ANSWER,
    asked,
    asked_words,
    by_name,
    entry_weights,
    evidence,
    first_word,
    index_entries,
    matches,
    score,
    scores,
    subject_named,
    term_words,
)

__all__ = [
    "ANSWER",
    "FLOOR_SLACK",
    "KEY_MAX_ZIPF",
    "KeyIndex",
    "Keys",
    "MAX_ROUTE",
    "RELATION_MAX_ZIPF",
    "Watched",
    "about",
    "answer_words",
    "asked",
    "asked_words",
    "by_name",
    "candidates",
    "changed",
    "document_key",
    "entry_weights",
    "evidence",
    "first_word",
    "in_order",
    "index_entries",
    "key_for",
    "matches",
    "may_reroute",
    "named",
    "not_reaching",
    "rare",
    "reading_key",
    "reached",
    "reaches",
    "refusal",
    "related",
    "relation_words",
    "route",
    "score",
    "scores",
    "subject_named",
    "subject_terms",
    "term_words",
    "unreachable",
    "unroutable",
    "watched",
]
