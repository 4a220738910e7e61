"""How the teaching benchmark scores answers: each fact asked in up to four forms, answered six ways, greedily, as a
user reads the answer.

Forms: the cloze prompt (Rel: the answer starts the 8-token continuation), an unseen paraphrase (Gen: the same), a
plain question (`Question: ...?\\nAnswer:`, QA: the answer within the 16-token continuation), and the same question
as a user's message to /v1/chat/completions (Chat: the same; the service's ways only).
Ways (`MODES`): the service as it answers after teaching, with its knowledge as weights (the deltas), as context
(the routed documents' text before the prompt), both, or auto, the server's default (both where the prompt is
routed; `knowledge_as`); BM25 retrieval (the top-2 taught documents
before the prompt, the base model); and the in-context upper bound (the fact's own document before the prompt, the
base model). Requests go 16 at a time: the server decodes them in one batch.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx

from bench.retrieval import bm25_top

FORMS = {"rel": ("probe", 8), "gen": ("paraphrase", 8), "qa": ("question", 16), "chat": ("question", 16)}
SERVICE = ("weights", "context", "both", "auto")
MODES = ("weights", "context", "both", "auto", "retrieval", "in_context")
CONCURRENCY = 16


def correct(form: str, answer: str, text: str) -> bool:
    if form in ("qa", "chat"):
        return answer.lower() in text.lower()
    return text.strip().startswith(answer)


def chat(mode: str, question: str, tokens: int) -> tuple[str, dict]:
    """The question as a user's message: "Question: Who founded X?\nAnswer:" -> "Who founded X?"."""
    message = question.removeprefix("Question:").removesuffix("Answer:").strip()
    return "/v1/chat/completions", {"model": "ckl", "messages": [{"role": "user", "content": message}],
                                    "max_tokens": tokens, "temperature": 0, "knowledge_as": mode}


def body(mode: str, prompt: str, tokens: int, own: str, documents: list[str]) -> dict:
    """The /generate request that asks `prompt` the way `mode` answers."""
    if mode in SERVICE:
        return {"prompt": prompt, "max_new_tokens": tokens, "knowledge_as": mode}
    texts = [own] if mode == "in_context" else [documents[i] for i in bm25_top(prompt, documents)]
    return {"prompt": "\n".join(texts) + "\n" + prompt, "max_new_tokens": tokens, "knowledge": "off"}


def generate(url: str, path: str, request: dict) -> dict:
    """The answer's text and prompt tokens, from /generate or an OpenAI route."""
    response = httpx.post(f"{url}{path}", json=request, timeout=600)
    response.raise_for_status()
    body = response.json()
    if path == "/generate":
        return body
    return {"text": body["choices"][0]["message"]["content"], "prompt_tokens": body["usage"]["prompt_tokens"],
            "knowledge": body.get("knowledge")}


def answer_all(url: str, requests: list[tuple[str, dict]]) -> list[dict]:
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        return list(pool.map(lambda request: generate(url, *request), requests))


def score(url: str, facts: list[dict], documents: list[str], modes: tuple[str, ...] = MODES,
          asked: Callable[[dict], bool] = lambda fact: True) -> list[dict]:
    """Each fact's answers: {mode: {form: correct}}, the prompt tokens each mode's requests took and each answer's
    text ({mode: {form: text}}; with both, the way it was answered before it: "context: ..."). A fact is a dict with
    its forms (`probe`, `paraphrase`, `question`: {prompt, answer}, any missing) and `document`, its document's
    index in `documents`."""
    jobs = [(i, mode, form) for i, fact in enumerate(facts) if asked(fact) for mode in modes
            for form, (key, _) in FORMS.items() if fact.get(key) and (form != "chat" or mode in SERVICE)]
    requests = [chat(mode, facts[i]["question"]["prompt"], FORMS[form][1]) if form == "chat" else
                ("/generate", body(mode, facts[i][FORMS[form][0]]["prompt"], FORMS[form][1],
                                   documents[facts[i]["document"]], documents)) for i, mode, form in jobs]
    results: list[dict] = [{"modes": {}, "prompt_tokens": {}, "answers": {}} for _ in facts]
    for (i, mode, form), answer in zip(jobs, answer_all(url, requests)):
        probe = facts[i][FORMS[form][0]]
        results[i]["modes"].setdefault(mode, {})[form] = correct(form, probe["answer"], answer["text"])
        results[i]["prompt_tokens"].setdefault(mode, []).append(answer["prompt_tokens"])
        way = (answer.get("knowledge") or {}).get("answered_as") if mode == "both" else None
        results[i]["answers"].setdefault(mode, {})[form] = f"{way}: {answer['text']}" if way else answer["text"]
        if mode == "weights" and form == "rel":
            results[i]["answer"] = answer["text"]
    return results


def summary(results: list[dict], modes: tuple[str, ...] = MODES) -> dict:
    """Per mode: the share of facts answered in each form (None where no fact has that form) and the mean prompt
    tokens of its requests."""
    out = {}
    for mode in modes:
        scored = [r for r in results if mode in r["modes"]]
        shares = {form: share([r["modes"][mode][form] for r in scored if form in r["modes"][mode]]) for form in FORMS}
        tokens = [t for r in scored for t in r["prompt_tokens"][mode]]
        out[mode] = {**shares, "prompt_tokens": round(statistics.mean(tokens), 1) if tokens else None}
    return out


def share(flags: list[bool]) -> float | None:
    return round(statistics.mean(flags), 3) if flags else None


def complete(url: str, prompt: str, tokens: int = 8, way: str | None = None) -> str:
    """The answer a client gets that asks its knowledge `way` (None: that does not say, the server's default)."""
    body = {"prompt": prompt, "max_new_tokens": tokens, **({"knowledge_as": way} if way else {})}
    return httpx.post(f"{url}/generate", json=body, timeout=600).json()["text"]


def unchanged_by_way(url: str, before: dict[str, str], ways: tuple[str, ...]) -> dict[str, float | None]:
    """Per way of answering, the share of prompts answered after teaching as before it (`before`: prompt -> answer,
    on the fresh server, where every way answers as the base model)."""
    return {way: share([complete(url, p, way=way) == out for p, out in before.items()]) for way in ways}


def completes(url: str, probe: dict, tokens: int = 8) -> bool:
    return complete(url, probe["prompt"], tokens).strip().startswith(probe["answer"])
