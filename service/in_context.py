"""Knowledge as context: the text of the documents a prompt is routed to, put before it.

A request chooses how its knowledge answers (`knowledge_as`): as weights (the routed documents' deltas, the
default), as context (their text before the prompt, every delta off), or both. The documents are those the prompt
is routed to in the version it runs on (or those it names), best route score first, as many as fit the prompt
limit, at most MAX_DOCUMENTS; the answer cites them. What it costs is the documents' tokens: the answer's
`prompt_tokens` counts them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from core.model.served_model import ServingModel
from core.served import Choice
from core.state import Knowledge
from service.schemas import KnowledgeAs

MAX_DOCUMENTS = 3  # a prompt about one subject reaches its few documents; more is mostly cost


@dataclass(frozen=True)
class InContext:
    ids: list[int]  # the prompt's token ids with the documents before it
    choice: Choice  # the knowledge the generation may use: routed on the prompt as sent
    documents: list[str]  # the ids of the documents put before the prompt


def ranked(used: list[dict]) -> list[str]:
    """The routed documents a request's citation names, best route score first (ties: teaching order)."""
    routed = [u for u in used if u.get("document_id")]
    return [u["document_id"] for u in sorted(routed, key=lambda u: -(u.get("score") or 0.0))]


def joined(ids: list[int], bos: int | None, texts: list[list[int]]) -> list[int]:
    """The documents' tokens before the prompt's, after its beginning-of-sequence token where it has one."""
    head = ids[:1] if ids and bos is not None and ids[0] == bos else []
    return [*head, *(t for text in texts for t in text), *ids[len(head):]]


def with_context(serving: ServingModel, ids: list[int], version: int | None, load: Callable[[], Knowledge] | None,
                 choice: Choice, knowledge_as: KnowledgeAs, text_of: Callable[[str], str | None],
                 max_tokens: int) -> InContext:
    """The request as `knowledge_as` asks: its prompt with the routed documents' text before it (within
    `max_tokens` in all), routed on the prompt it sent, with the deltas on only for "both"."""
    prompt = serving.tokenizer.decode(ids, skip_special_tokens=True)
    with serving.pinned(version, load) as pinned:
        used = serving.cite(pinned, prompt, serving.routes(pinned, prompt, choice))
    texts, documents, room = [], [], max_tokens - len(ids)
    for document_id in ranked(used)[:MAX_DOCUMENTS]:
        if (text := text_of(document_id)) is None:
            continue
        tokens = serving.tokenizer(text.strip() + "\n", add_special_tokens=False)["input_ids"]
        if len(tokens) <= room:
            texts.append(tokens)
            documents.append(document_id)
            room -= len(tokens)
    return InContext(joined(ids, serving.tokenizer.bos_token_id, texts),
                     replace(choice, weights=knowledge_as == "both", route_on=prompt), documents)
