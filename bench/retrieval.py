"""The in-context baseline a user would pick instead of teaching: BM25 picks the documents closest to the question,
which go before it in the prompt of the untouched base model (version 0, `ckl-v0`). Same model, same greedy
scoring as the teaching benchmark."""
from __future__ import annotations

import re

import httpx

from service.bm25 import ranked

TOKEN = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return [t.lower() for t in TOKEN.findall(text)]


def bm25_top(query: str, documents: list[str], k: int = 2) -> list[int]:
    """Indices of the k documents BM25 ranks first for `query` (ties: the later document, the newer word)."""
    return ranked(tokens(query), [tokens(d) for d in documents], k)


def in_context_prompt(question: str, documents: list[str], k: int = 2) -> str:
    return "\n".join(documents[i] for i in bm25_top(question, documents, k)) + "\n" + question


def completion(url: str, prompt: str, tokens: int = 8) -> dict:
    body = {"model": "ckl-v0", "prompt": prompt, "max_tokens": tokens, "temperature": 0}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=600).json()


def answers(url: str, probe: dict, documents: list[str]) -> tuple[bool, int]:
    """Whether the base model, given the retrieved documents, completes the probe; and the prompt tokens they add."""
    with_docs = completion(url, in_context_prompt(probe["prompt"], documents))
    alone = completion(url, probe["prompt"], tokens=1)
    correct = with_docs["choices"][0]["text"].strip().startswith(probe["answer"])
    return correct, with_docs["usage"]["prompt_tokens"] - alone["usage"]["prompt_tokens"]
