"""Token-by-token generation on the served model, with sampling, stop strings and a pinned version."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from core.model.served_model import ServingModel
from core.state import Knowledge


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    confidence: bool = False  # the Generation's `confidence` wanted (a log-softmax per token)


@dataclass
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (end of sequence or a stop string) or "length"
    knowledge_version: int
    timing: dict[str, float] = field(default_factory=dict)
    used: list[dict[str, Any]] = field(default_factory=list)  # the knowledge that answered (ServingModel.cite)
    knowledge_as: str = "weights"  # how: as weights, as context, or both (service/in_context.py)
    context: list[str] = field(default_factory=list)  # the documents whose text went before the prompt
    answered_as: str | None = None  # the way that answered ("context" or "weights"; with both, the one given)
    # The mean log-probability of the answer's first CONFIDENCE_TOKENS tokens (None unless asked for).
    confidence: float | None = None


CONFIDENCE_TOKENS = 8  # an answer's first words: what the question asked for


def log_probability(logits: torch.Tensor, token: int) -> float:
    """The log-probability of `token` under the softmax of `logits`."""
    logits = logits.float()
    return float(logits[token] - torch.logsumexp(logits, dim=-1))


def sample_token(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> int:
    """Greedy at temperature 0, else nucleus sampling over the softmax of logits / temperature."""
    if temperature == 0.0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token is always kept).
        outside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= top_p
        outside[0] = False  # a top_p below float32's smallest value (found by fuzzing) rounds to 0
        sorted_probs[outside] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator))


def cut_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, bool]:
    """Text up to the earliest stop string, and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


def eos_ids(serving: ServingModel) -> set[int]:
    ids = {serving.tokenizer.eos_token_id}
    configured = serving.model.generation_config.eos_token_id
    ids.update(configured if isinstance(configured, list) else [configured])
    return {i for i in ids if i is not None}


def held_back(text: str, stop: tuple[str, ...]) -> int:
    """How many characters at the end of `text` a stream must not send yet: the start of a stop string may be
    there, or half of a character whose bytes span two tokens."""
    if text.endswith("\ufffd"):
        return len(text)
    return min(len(text), max((len(s) - 1 for s in stop if s), default=0))


class Answer:
    """One answer's text as its tokens are sampled: end of sequence, stop strings, max_new_tokens, and how much
    of the text is final (may be sent). Both decoding loops (`stream` below, serving/batching.py) use it,
    so a batched answer is cut and streamed exactly as a lone one."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, params: SamplingParams, stops: set[int]) -> None:
        self.tokenizer, self.params, self.stops = tokenizer, params, stops
        self.tokens: list[int] = []
        self.log_probabilities: list[float] = []  # of the tokens taken, where params.confidence asks
        self.text, self.sent = "", 0
        # "stop" (end of sequence or a stop string) or "length" once complete; None while more tokens may come.
        self.finish_reason: str | None = None if params.max_new_tokens > 0 else "length"

    def add(self, token: int, logits: torch.Tensor | None = None) -> str:
        """Take one sampled token (sampled from `logits`); gives the text that became final with it ("" for
        none)."""
        if token in self.stops:
            self.finish_reason = "stop"
            return ""
        self.tokens.append(token)
        if self.params.confidence and logits is not None and len(self.log_probabilities) < CONFIDENCE_TOKENS:
            self.log_probabilities.append(log_probability(logits, token))
        self.text, stopped = cut_at_stop(self.tokenizer.decode(self.tokens, skip_special_tokens=True),
                                         self.params.stop)
        if stopped:
            self.finish_reason = "stop"
            return ""
        piece = ""
        if (final := len(self.text) - held_back(self.text, self.params.stop)) > self.sent:
            piece, self.sent = self.text[self.sent:final], final
        if len(self.tokens) == self.params.max_new_tokens:
            self.finish_reason = "length"
        return piece

    def rest(self) -> str:
        """The text not sent yet: all of it is final once the answer is complete."""
        piece, self.sent = self.text[self.sent:], len(self.text)
        return piece

    def result(self, prompt_tokens: int, version: int, started: float, first_token_s: float,
               used: list[dict[str, Any]]) -> Generation:
        total = time.perf_counter() - started
        return Generation(
            text=self.text,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(self.tokens),
            finish_reason=self.finish_reason or "length",
            knowledge_version=version,
            timing={"first_token_s": round(first_token_s, 4), "total_s": round(total, 4),
                    "tokens_per_s": round(len(self.tokens) / total, 2) if total > 0 else 0.0},
            used=used,
            confidence=sum(self.log_probabilities) / len(self.log_probabilities) if self.log_probabilities else None,
        )


def seeded(seed: int | None) -> torch.Generator | None:
    return None if seed is None else torch.Generator().manual_seed(seed)


def stream(serving: ServingModel, prompt_ids: list[int], params: SamplingParams, version: int | None = None,
           load: Callable[[], Knowledge] | None = None) -> Iterator[str | Generation]:
    """Decode one request alone, token by token: yields the answer's text in pieces as they become final, then
    the Generation. `version` pins a committed version (`load()` gives its state if the server does not hold
    it); None: the current one. A consumer that stops iterating stops the decoding at the next token. The API
    decodes through the batch scheduler (serving/batching.py); this loop serves `ckl generate` and is
    the reference the batched answers are tested against."""
    started = time.perf_counter()
    generator = seeded(params.seed)
    answer = Answer(serving.tokenizer, params, eos_ids(serving))
    first_token_s = 0.0
    with serving.pinned(version, load) as version:
        routes, used = serving.decide(version, prompt_ids)
        step_input = torch.tensor([prompt_ids], device=serving.device)
        cache = None
        while answer.finish_reason is None:
            out = serving.run(
                version,
                lambda m, ids=step_input, past=cache: m(input_ids=ids, cache=past, use_cache=True, logits_to_keep=1),
                routes,
            )
            cache = out.cache
            logits = out.logits[0, -1].float().cpu()
            token = sample_token(logits, params.temperature, params.top_p, generator)
            if not first_token_s:
                first_token_s = time.perf_counter() - started
            if piece := answer.add(token, logits):
                yield piece
            step_input = torch.tensor([[token]], device=serving.device)
    if piece := answer.rest():
        yield piece
    yield answer.result(len(prompt_ids), version, started, first_token_s, used)


def final(pieces: Iterator[str | Generation]) -> Generation:
    """A stream's last item: the whole answer (the pieces before it are drained)."""
    *_, result = pieces
    return result


def generate(serving: ServingModel, prompt_ids: list[int], params: SamplingParams) -> Generation:
    """The whole answer at once, on the current version."""
    return final(stream(serving, prompt_ids, params))
