"""Knowledge as context: the text of the documents a prompt is routed to, put before it.

A request chooses how its knowledge answers (`knowledge_as`): as weights (the routed documents' deltas), as context
(their text before the prompt, every delta off), or both: the prompt answered both ways at once, and the answer the
documents bear out given (the context's first; `context_wins`), or where neither is, the one the model is surer of
(the mean log-probability of its first tokens), or the context's where no delta answered (the documents are not
learned yet: service/accepted.py); `answered_as` says which. The documents are those the prompt is routed to in the
version it runs on (or those it names), best route score first (among equal scores, the text the prompt's words
point to most: `read_order`), as many as fit the prompt limit, at most MAX_DOCUMENTS; where it is routed to none,
the newest about a known subject whose name it holds (core/routing: `named`); the answer cites them. `auto` (the
default, CKL_ROUTED_KNOWLEDGE_AS) is both, for the documents the prompt is routed to only: a prompt that merely
names a known subject ("the river of Vienna") is answered as the model answers it, not from a paragraph about
Vienna's new mayor. What context costs is the documents' tokens: the answer's `prompt_tokens` counts them (both
ways' tokens with both).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from core import subjects
from core.model.served_model import ServingModel
from core.served import Choice
from core.state import Knowledge
from service import bm25
from serving.generation import Generation, final

MAX_DOCUMENTS = 3  # a prompt about one subject reaches its few documents; more is mostly cost
MAX_CANDIDATES = 16  # the routed documents whose text is ranked for the few read: a read and a BM25 pass each


@dataclass(frozen=True)
class InContext:
    ids: list[int]  # the prompt's token ids with the documents before it
    choice: Choice  # the knowledge the generation may use: routed on the prompt as sent
    documents: list[str]  # the ids of the documents put before the prompt
    text: str = ""  # their text
    replaced: tuple[str, ...] = ()  # the answers they replaced: their text may still name them ("moved from X to Y")
    nearest: str = ""  # their sentence nearest the prompt (`nearest_sentence`), said again before it


@dataclass(frozen=True)
class Read:
    """A document as context reads it: its text, and the answers of the facts it replaced."""
    text: str
    replaced: tuple[str, ...] = ()


def ranked(used: list[dict]) -> list[str]:
    """The routed documents a request's citation names, best route score first (ties: teaching order)."""
    routed = [u for u in used if u.get("document_id")]
    return [u["document_id"] for u in sorted(routed, key=lambda u: -(u.get("score") or 0.0))]


def read_order(prompt: str, used: list[dict], text_of: Callable[[str], Read | None]) -> list[tuple[str, Read]]:
    """The cited documents as context reads them (at most MAX_CANDIDATES, those with a text): best route score
    first and, among equal scores, the one whose text the prompt's words point to most (BM25; a tie: teaching
    order). Ten documents about one firm are all routed by its name alone, at one score: the one that says where
    its factory is comes first for "The factory of Vontarex is in", not the three taught first."""
    score = {u["document_id"]: u.get("score") or 0.0 for u in used if u.get("document_id")}
    found = [(d, document) for d in ranked(used)[:MAX_CANDIDATES] if (document := text_of(d)) is not None]
    by_text = bm25.ranked(terms(prompt), [terms(document.text) for _, document in found], ties_to_later=False)
    place = {i: rank for rank, i in enumerate(by_text)}
    return [found[i] for i in sorted(range(len(found)), key=lambda i: (-score[found[i][0]], place[i]))]


def joined(ids: list[int], bos: int | None, texts: list[list[int]]) -> list[int]:
    """The documents' tokens before the prompt's, after its beginning-of-sequence token where it has one."""
    head = ids[:1] if ids and bos is not None and ids[0] == bos else []
    return [*head, *(t for text in texts for t in text), *ids[len(head):]]


def with_context(serving: ServingModel, ids: list[int], version: int | None, load: Callable[[], Knowledge] | None,
                 choice: Choice, text_of: Callable[[str], Read | None], max_tokens: int,
                 accepted: Callable[[str], list[dict]] = lambda prompt: [], by_subject: bool = True) -> InContext:
    """The request with its knowledge as context: its prompt with the routed documents' text before it (within
    `max_tokens` in all), routed on the prompt it sent, every delta off; `by_subject`: where it is routed to none,
    those about a known subject it names. `accepted`: the documents not learned yet that the prompt reaches
    (service/accepted.py), cited as the learned ones are, after them on a tie."""
    prompt = serving.tokenizer.decode(ids, skip_special_tokens=True)
    with serving.pinned(version, load) as pinned:
        used = serving.cite(pinned, prompt, serving.routes(pinned, prompt, choice))
        if by_subject and not choice.named and not any(u.get("document_id") for u in used):  # a subject named
            used += serving.named_in(pinned, prompt, choice, MAX_DOCUMENTS)
    learned = {u.get("document_id") for u in used}
    used += [u for u in accepted(prompt) if u["document_id"] not in learned]  # committed meanwhile: once
    texts, documents, read, room = [], [], [], max_tokens - len(ids)
    for document_id, document in read_order(prompt, used, text_of):
        tokens = serving.tokenizer(document.text.strip() + "\n", add_special_tokens=False)["input_ids"]
        if len(tokens) <= room:
            texts.append(tokens)
            documents.append(document_id)
            read.append(document)
            room -= len(tokens)
        if len(documents) == MAX_DOCUMENTS:
            break
    if nearest := nearest_sentence(prompt, [d.text for d in read]):  # said again last, right before the prompt
        tokens = serving.tokenizer(nearest + "\n", add_special_tokens=False)["input_ids"]
        texts += [tokens] if len(tokens) <= room else []
    return InContext(joined(ids, serving.tokenizer.bos_token_id, texts),
                     replace(choice, weights=False, route_on=prompt), documents,
                     "\n".join(d.text for d in read), tuple(a for d in read for a in d.replaced), nearest or "")


def terms(text: str) -> list[str]:
    """A text's words as BM25 ranks sentences by them: lower case, without function words, by their first letters
    ("headquartered" is "headquarters")."""
    return [w[:subjects.STEM] for w in re.findall(r"\w+", text.lower()) if w not in subjects.FUNCTION_WORDS]


def nearest_sentence(prompt: str, texts: list[str]) -> str | None:
    """The sentence of the read documents that the prompt's words point to most (BM25 over their sentences), to be
    said again right before the prompt; None where the documents are one sentence or none shares a word with it.
    The small model answers more from what it read last (docs/decisions.md, "A paragraph's nearest sentence said
    again")."""
    sentences = [text[a:b] for text in texts for a, b in subjects.sentence_spans(text)]
    if len(sentences) < 2:
        return None
    asked, split = terms(prompt), [terms(s) for s in sentences]
    best = bm25.ranked(asked, split, 1, ties_to_later=False)[0]  # a tie: the earlier, where the subject is named
    return sentences[best] if set(asked) & set(split[best]) else None


Run = Callable[[list[int], Choice], Iterator[str | Generation]]


def sureness(answer: Generation) -> float:
    return float("-inf") if answer.confidence is None else answer.confidence


# A number whole ("12,500", "4.5"), or a word; the punctuation after it, if any.
WORD = re.compile(r"(\d+(?:[.,]\d+)*|[^\W_][\w'’-]*)([,.;:!?]?)")


def said(source: str) -> str:
    """The documents' words, lower case, one space apart, a "|" between sentences (a name does not run across)."""
    return " ".join(w + (" |" if p and p in ".!?" else "") for w, p in WORD.findall(source)).lower()


# The name or number an answer gives (lower case) and how many words come before it; None: none the text holds.
Said = tuple[str, int] | None


def held(words: list[str], before: int, source_words: str) -> Said:
    name = " ".join(w.lower() for w in words)
    return (name, before) if f" {name} " in f" {source_words} " else None


def asks(words: list[str], asked: str) -> bool:
    """Whether a name is one the prompt's words (`said`) hold: "Vontarex" is no answer to "The main rival of Vontarex
    is", though every document about Vontarex names it."""
    return f" {' '.join(w.lower() for w in words)} " in f" {asked} "


def opened_with(answer: str, source_words: str, asked: str = "") -> Said:
    """The name or number an answer opens with (capitalised or a digit, after any function words; its first two
    words, to the first punctuation or function word), where the documents' words (`said`) hold it: " the Lake
    Tirrowen, a lake" read from a text that names Lake Tirrowen. What the text says, not what the model knew."""
    words = WORD.findall(first_line(answer))
    before = 0
    while words and words[0][0].lower() in subjects.FUNCTION_WORDS:
        words.pop(0)
        before += 1
    if not words or not named(words[0][0]):
        return None
    opening = []
    for word, punctuation in words[:2]:
        if opening and word.lower() in subjects.FUNCTION_WORDS:
            break
        opening.append(word)
        if punctuation:
            break
    return None if asks(opening, asked) else held(opening, before, source_words)


def named_first(answer: str, source_words: str, asked: str = "") -> Said:
    """The first name or number in an answer's first line (up to two capitalised words or numbers in a row) that the
    prompt does not hold (`asks`), where the documents' words hold it: a question is answered in a sentence ("The
    bridge will be 186 metres long", "Zelmora Foods was founded by Ada Brell"), which opens with other words than
    its answer."""
    words = WORD.findall(first_line(answer))
    for i, (word, punctuation) in enumerate(words):
        if named(word) and word.lower() not in subjects.FUNCTION_WORDS:
            following = words[i + 1][0] if i + 1 < len(words) and not punctuation else ""
            name = [word, following] if named(following) else [word]
            if not asks(name, asked):
                return held(name, i, source_words)
    return None


def first_line(answer: str) -> str:
    return answer.strip().split("\n", 1)[0]  # "1934\nQuestion: ..." gives 1934, not "1934 Question"


def named(word: str) -> bool:
    return word[:1].isupper() or word[:1].isdigit()


def one_name(by_context: tuple[str, int], by_weights: tuple[str, int]) -> bool | None:
    """Where both answers give one name: whether the context's gives it better, the fuller ("Nell Varga" before
    "Varga"), else the sooner ("Park Ji-hoon" before "now Park Ji-hoon"); None where they give two names."""
    (context_name, context_before), (weights_name, weights_before) = by_context, by_weights
    if context_name == weights_name:
        return context_before <= weights_before
    if f" {context_name} " in f" {weights_name} " or f" {weights_name} " in f" {context_name} ":
        return len(context_name) > len(weights_name)
    return None


def in_nearest(by_context: tuple[str, int], by_weights: tuple[str, int], nearest: str) -> bool | None:
    """Where two answers give two names the documents hold: whether the context's is the one the sentence nearest the
    prompt holds; None where it holds both or neither. Given three documents about one firm, the reader may answer
    with another's name ("The chief executive of Vontarex is" Imre Castellan, its finance chief), the delta with the
    name the chief executive's sentence says."""
    words = f" {said(nearest)} "
    context_in, weights_in = (f" {name} " in words for name, _ in (by_context, by_weights))
    return context_in if context_in != weights_in else None


def context_wins(by_context: Generation, by_weights: Generation, source: str, replaced: tuple[str, ...] = (),
                 nearest: str = "", prompt: str = "") -> bool:
    """Whether the context's answer is given. One that gives an answer the documents replaced loses to one that does
    not: a text that announces a change still names the old value ("moved its headquarters from Brackwell to
    Tiverholm"), its delta was trained on the new state. Else the first way whose answer opens with what the
    documents say (`opened_with`: a cloze's continuation) is given, the context's first; else the first whose answer
    names what they say (`named_first`: a question's sentence); else the surer (a tie goes to context). A name the
    prompt holds is no answer (`asks`). Where both give one name, the answer that gives it sooner or in full
    (`one_name`); where they give two, the one the sentence nearest the prompt holds (`in_nearest`), else the
    context's. The model reading the text comes before its deltas: a delta trained on a paragraph is sure of its
    words whatever it is asked."""
    if replaced:
        old = said(". ".join(replaced) + ".")
        stale = [bool(opened_with(a.text, old) or named_first(a.text, old)) for a in (by_context, by_weights)]
        if stale[0] != stale[1]:
            return stale[1]
    words, asked = said(source), said(prompt)
    for bears in (opened_with, named_first):
        context_read, weights_read = bears(by_context.text, words, asked), bears(by_weights.text, words, asked)
        if context_read and weights_read:
            same = one_name(context_read, weights_read)
            if same is None and nearest:
                same = in_nearest(context_read, weights_read, nearest)
            if same is not None:
                return same
        if context_read or weights_read:
            return context_read is not None
    return sureness(by_context) >= sureness(by_weights)


def surer(run: Run, as_context: InContext, ids: list[int], choice: Choice) -> Generation:
    """The prompt answered with its knowledge as context and as weights at once (`run(ids, choice)` decodes one in
    the batch), and the answer given of the two (`context_wins`; the context's where the weights' used no knowledge
    and the context some). Its usage counts both ways' tokens."""
    with ThreadPoolExecutor(2) as pool:  # both submitted before either is waited for: decoded side by side
        futures = [pool.submit(final, run(as_context.ids, as_context.choice)),
                   pool.submit(final, run(ids, choice))]
        by_context, by_weights = (future.result() for future in futures)
    # The weights' answer used no knowledge (no delta is routed: the documents are not learned yet) while the context
    # holds some: only the text knows anything.
    if as_context.documents and not by_weights.used or context_wins(
            by_context, by_weights, as_context.text, as_context.replaced, as_context.nearest,
            as_context.choice.route_on or ""):
        winner, other = by_context, by_weights
        winner.context, winner.answered_as = as_context.documents, "context"
    else:
        winner, other = by_weights, by_context
        winner.answered_as = "weights"
    winner.prompt_tokens += other.prompt_tokens
    winner.completion_tokens += other.completion_tokens
    return winner
