"""Training examples from a document: its token weights and the windows the training loop sees.

One module for the learner and every benchmark, so a benchmark measures the examples the service trains on.
"""
from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass

from core import registry, routing, subjects
from core.scoring import join_probe
from core.settings import Settings
from core.subjects import sentence_spans
from core.training import Example
from workers import about, contexts, facts, weighting
from workers.questions import as_question, as_role

WEIGHTINGS = ("train_attention", "uniform", "oracle")


@dataclass(frozen=True)
class Encoded:
    """A tokenized document: ids, each token's character range, and the text they index."""
    text: str
    ids: list[int]
    offsets: list[tuple[int, int]]


def encode(tokenizer, text: str, max_tokens: int | None = None) -> Encoded:
    enc = tokenizer(text, return_offsets_mapping=True, truncation=max_tokens is not None, max_length=max_tokens)
    return Encoded(text, enc["input_ids"], [tuple(o) for o in enc["offset_mapping"]])


def token_weights(doc: Encoded, how: str, answers: list[str], phi_weights: Callable[[list[int]], list[float]] | None,
                  threshold: float, floor: float = 0.0) -> list[float]:
    """Weights of the predicted tokens: phi's above `threshold` of the largest (train_attention), or with a
    floor under them when one is given; 1 on the answers' occurrences in the text (oracle); or uniform; 0 on the
    values the text says changed."""
    if how == "train_attention":
        assert phi_weights is not None, "train_attention weighting needs phi"
        weights = phi_weights(doc.ids)
        weights = weighting.floored(weights, floor) if floor else weighting.thresholded(weights, threshold)
    elif how == "oracle":
        weights = weighting.oracle(doc.offsets, doc.text, answers)
    else:
        weights = weighting.uniform(len(doc.ids))
    # A value the text says is no longer so ("from Brackwell to Tiverholm") is not learned as an answer: trained, it
    # came back for the prompts the new value was taught for.
    return weighting.without_spans(weights, doc.offsets, facts.old_value_spans(doc.text))


def windows(ids: list[int], weights: list[float], window: int) -> list[Example]:
    """The document in windows of `window` tokens that overlap by one (a window's first token is context);
    a window with no weight is left out."""
    examples = []
    for start in range(0, max(len(ids) - 1, 1), window - 1):
        chunk_ids, chunk_w = ids[start : start + window], weights[start : start + window]
        if start:
            chunk_w = [0.0, *chunk_w[1:]]
        if any(chunk_w):
            examples.append(Example(chunk_ids, chunk_w))
    return examples


def document_examples(doc: Encoded, weights: list[float], window: int, bos_token_id: int | None,
                      sentences: bool = False) -> list[Example]:
    """The windows, and with `sentences` each later sentence on its own too (workers/contexts.py)."""
    examples = windows(doc.ids, weights, window)
    if sentences:
        examples += contexts.sentence_examples(doc.ids, weights, doc.offsets, doc.text, bos_token_id, window)
    return examples


def ended_in(text: str, answer: str) -> bool:
    """Whether `text` ends `answer` where it says it: a mark of punctuation or the text's end right after it."""
    ends = [b for _, b in weighting.answer_spans(text, [answer])]  # each place the text says it, as oracle weighs it
    return any(text[b:b + 1] in tuple(".,;:!?)") or not text[b:].strip() for b in ends)


def probe_examples(tokenizer, probes: list[tuple[str, str]], questions: bool = False,
                   text: str | None = None) -> list[Example]:
    """Each probe as text, with weight on its answer's tokens only; a news prompt also without its time markers
    ("... is now" is asked as "... is"); with `questions`, each cloze also asked as the question a reader types and,
    where its verb names a role, by the role (workers/questions.py: "X is managed by" is also "Question: Who manages
    X?" and "The manager of X is"); with the document's `text`, a cloze whose answer the text ends also trains the
    full stop after it (docs/decisions.md: "A cloze's answer ends where the text ends it")."""
    variants = [(subjects.without_time_markers(prompt), answer) for prompt, answer in probes]
    if questions:
        variants += [(asked, answer) for prompt, answer in variants for asked in
                     (as_question(prompt, answer), as_role(prompt, answer)) if asked]
    # The delta learns where a name stops (it ran on: "Drostmannmannmann"), not where the text goes on ("Kessler
    # Laboratory for ..."): a made probe may have cut the name short. Each answer's places looked up once.
    ended = {answer: ended_in(text, answer) for _, answer in probes} if text is not None else {}
    examples = []
    for prompt, answer in dict.fromkeys([*probes, *variants]):
        ends = not prompt.rstrip().endswith("Answer:") and ended.get(answer, False)
        doc = encode(tokenizer, join_probe(prompt, answer) + ("." if ends else ""))
        weights = weighting.oracle(doc.offsets, doc.text, [answer])
        if ends and any(weights):
            weights = [1.0 if e == len(doc.text) and e > s else w for w, (s, e) in zip(weights, doc.offsets)]
        if any(weights):
            examples.append(Example(doc.ids, weights))
    return examples


def auto_probes(doc: Encoded, weights: list[float], min_prompt_words: int = 3) -> list[tuple[str, str]]:
    """Probes made from the document itself, for a document sent without any: the questions a reader would ask.

    One per fact the text gives (workers/facts.py): every name (never one of the document's subjects:
    about.main_subjects) and number a sentence gives, asked by the sentence up to it,
    without time markers ("is now" asks "is"), and the facts a reader asks the other way round; at most MAX_FACTS,
    those phi weighs most. A document with none gets one probe: its rarest word (phi's weight breaking ties), a
    subject's only when there is no other."""
    sentences = sentence_spans(doc.text)
    spans = subjects.name_spans(doc.text)
    starts, ends = [a for a, _ in doc.offsets], [b for _, b in doc.offsets]

    def answer_weight(begin: int, end: int) -> float:
        """The largest weight of a token inside [begin, end): found by bisection, not a pass over every token for
        every candidate (the tokens' ranges are in order)."""
        inside = range(bisect.bisect_right(ends, begin), min(bisect.bisect_left(starts, end), len(weights)))
        return max((weights[i] for i in inside if ends[i] > starts[i]), default=0.0)

    if made := facts.found(doc.text, sentences, spans, answer_weight, min_prompt_words):
        kept = set(sorted(made, key=lambda m: -m[0])[:MAX_FACTS])
        return [(prompt, answer) for w, prompt, answer in made if (w, prompt, answer) in kept]
    subject_words = {w for name in document_subjects(doc.text, sentences, spans) for w in name.split()}
    # Among the other words, one English never uses is most likely what the document teaches; a short sentence
    # ("Driva is a river.") still gives its last word.
    words = [m.span() for m in subjects.WORD.finditer(doc.text) if m.group().lower() not in subjects.FUNCTION_WORDS]
    other = [(a, b) for a, b in words if doc.text[a:b].lower() not in subject_words]
    rarest = lambda a, b: subjects.weight(doc.text[a:b].lower()) + answer_weight(a, b)

    def best_per_sentence(candidates: list[tuple[int, int]], least_words: int) -> list[tuple[float, str, str]]:
        made = []
        for (begin, end), its_own in zip(sentences, about.by_sentence(sentences, candidates)):
            said = [m.start() + begin for m in re.finditer(r"\S+", doc.text[begin:end])]  # where each word starts
            inside = [(a, b) for a, b in its_own if bisect.bisect_left(said, a) >= least_words]  # words before a
            if inside:
                a, b = max(inside, key=lambda span: (rarest(*span), span[0]))
                made.append((rarest(a, b), subjects.without_time_markers(doc.text[begin:a].strip()),
                             doc.text[a:b].strip()))
        return made

    made = (best_per_sentence(other, min_prompt_words) or best_per_sentence(other, 1)
            or best_per_sentence(words, 1))
    return [(prompt, answer) for _, prompt, answer in sorted(made, reverse=True)[:1]]


MAX_FACTS = 24  # an article of 800 words states about 20


def document_subjects(text: str, sentences: list[tuple[int, int]], spans: list[tuple[int, int, str]]) -> set[str]:
    """The names a document is about: one that starts a sentence (after its function words), or one used in two
    sentences."""
    found: set[str] = set()
    used_in: dict[str, set[int]] = {}
    for a, _, name in spans:
        if (sentence := about.sentence_of(sentences, a)) is None:
            continue
        used_in.setdefault(name, set()).add(sentence)
        lead = text[sentences[sentence][0]:a].split()
        if all(w.lower() in subjects.FUNCTION_WORDS for w in lead):
            found.add(name)
    return found | {name for name, where in used_in.items() if len(where) > 1}


def about_words(text: str) -> set[str]:
    """The words of the names a document is about (about.main_subjects)."""
    return set().union(*(subjects.words(name) for name in about.subjects_of(text, sentence_spans(text))[1]))


def checkable_auto_probes(doc: Encoded, weights: list[float],
                          unreachable: Callable[[list[tuple[str, str]]], list[str]]) -> list[tuple[str, str]]:
    """The auto-probes a document is trained and gated on: those its method can route to it (`unreachable`: the
    prompts it could not; an answer is left out of a routed document's key and the key depends on all the probes, so
    again until none is left out). A prompt that could not is first made to name the document's subject
    (about.named)."""
    made = auto_probes(doc, weights)
    if left_out := set(unreachable(made)):
        sentences = sentence_spans(doc.text)
        if subject := about.subjects_of(doc.text, sentences)[1]:
            called = about.kinds(doc.text, sentences, subject[0])
            made = list(dict.fromkeys((about.named(prompt, subject[0], called) if prompt in left_out else prompt,
                                       answer) for prompt, answer in made))
            left_out = set(unreachable(made))
    while left_out:
        made = [(prompt, answer) for prompt, answer in made if prompt not in left_out]
        left_out = set(unreachable(made))
    return made


def unreachable(method: str, text: str, settings: Settings) -> Callable[[list[tuple[str, str]]], list[str]]:
    """Which of a document's made probes could not reach it (for a per-document method, the framework's routing: a
    probe must name the document's key); a whole-version method's reach every prompt."""
    if not registry.get(method).per_document:
        return lambda probes: []
    return lambda probes: routing.unreachable(text, probes, settings.routing_threshold)
