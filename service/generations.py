"""Every generation the API runs goes through here, whichever route asked: the prompt's limits, the version
asked for, the caps on generations running and waiting, the batch scheduler that decodes them, and the
metrics."""
from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import closing, suppress
from dataclasses import replace
from typing import Any, Literal

from core.documents import UnknownDocument
from core.keys import Caller
from core.model.served_model import ServingModel, UnknownKnowledge
from core.namespaces import namespace_of
from core.served import Choice
from core.state import Knowledge as VersionKnowledge
from core.state import resolve, restored_by
from service.accepted import Accepted
from service.errors import ApiError, busy, field_error
from service.in_context import MAX_DOCUMENTS, InContext, Read, surer, with_context
from service.metrics import Metrics
from service.schemas import DOCUMENT_NAME, Knowledge, KnowledgeAs
from serving.batching import BUSY_GAP_S, Scheduler
from serving.generation import Generation, SamplingParams
from serving.runtime import Runtime

# What a request asks to answer with: "auto" (the prompt's routes), "off" (the base model), or documents by id and
# subjects by name (service/schemas.py: KnowledgeChoice).
Chosen = Literal["auto", "off"] | list[str]


def require_serving(runtime: Runtime) -> ServingModel:
    """The served model; 503 while it loads (or failed to), before anything is generated or stored."""
    if runtime.serving is None:
        message = "start-up failed: an admin sees why on GET /versions" if runtime.error else \
            "the model is still loading; GET /ready says when"
        raise ApiError(503, "not_ready", message)
    return runtime.serving


class GenerationService:
    """Admission and scheduling for the API's generations (one per app, in app.state.generations)."""

    def __init__(self, runtime: Runtime, metrics: Metrics) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.metrics = metrics
        # Admitted generations: those decoding (at most max_concurrent_generations, the scheduler's cap) and those
        # waiting for a row.
        self._admitted = threading.BoundedSemaphore(self.settings.limits.max_concurrent_generations
                                                    + self.settings.limits.max_waiting_generations)
        self._per_key: dict[str, int] = {}  # a key's owner -> its generations admitted
        self._per_key_lock = threading.Lock()
        self._scheduler: Scheduler | None = None
        self._scheduler_lock = threading.Lock()
        self._accepted = Accepted(self.settings.routing_threshold)
        # A request's default way: the served method's (CKL_<METHOD>_KNOWLEDGE_AS); one that reads no text, weights.
        self.knowledge_as: KnowledgeAs = getattr(self.settings.method_config(self.settings.method), "knowledge_as",
                                                 "weights")
        runtime.decoding = self.decoding

    def decoding(self, within_s: float = BUSY_GAP_S) -> bool:
        """Whether this process decodes, or did `within_s` ago (Scheduler.busy)."""
        return self._scheduler is not None and self._scheduler.busy(within_s)

    def serving(self) -> ServingModel:
        return require_serving(self.runtime)

    def scheduler(self) -> Scheduler:
        serving = self.serving()
        with self._scheduler_lock:  # built on first use: the model is not loaded when the app is made
            if self._scheduler is None:
                limits = self.settings.limits
                self._scheduler = Scheduler(serving, limits.max_concurrent_generations, limits.prefill_share)
            return self._scheduler

    def prompt_ids(self, prompt: str, max_new_tokens: int, field: str = "prompt",
                   tokens_field: str = "max_new_tokens") -> list[int]:
        """The prompt's token ids, within the settings' limits; `field` and `tokens_field` name the request's
        fields in a 422 (the OpenAI routes call them differently)."""
        s = self.settings.limits
        if len(prompt) > s.max_prompt_chars:
            raise field_error(field, "max_chars", f"longer than {s.max_prompt_chars} characters")
        if max_new_tokens > s.max_new_tokens_cap:
            raise field_error(tokens_field, "less_than_equal", f"must be <= {s.max_new_tokens_cap}")
        ids = self.serving().tokenizer(prompt)["input_ids"]
        if len(ids) > s.max_prompt_tokens:
            raise field_error(field, "max_tokens", f"{len(ids)} tokens, more than {s.max_prompt_tokens}")
        return ids

    def version(self, model_version: int | None) -> int | None:
        """A version asked for by name: it must exist, and an admin's removal must not be undone by asking it."""
        if model_version is None:
            return None
        if not self.runtime.versions.exists(model_version):
            raise ApiError(404, "model_not_found", f"no knowledge version {model_version}")
        if restored_by(self.runtime.versions, model_version):
            raise ApiError(404, "model_not_found", f"version {model_version} holds documents removed since")
        return model_version

    def choice(self, knowledge: Chosen, caller: Caller | None) -> Choice:
        """What a request may use: the caller's namespaces (None for the server's own callers: all), and the
        documents and subjects it names, if it names any; 422 for a document the caller may not see (another key's,
        or, but for an admin, one outside the caller's namespaces), as for one that does not exist."""
        namespaces = caller.namespaces() if caller is not None else None
        if isinstance(knowledge, str):
            return Choice(namespaces)
        if caller is None:
            raise TypeError("a request that names its knowledge needs the caller who may see it")
        documents = {name for name in knowledge if DOCUMENT_NAME.fullmatch(name)}
        for document_id in sorted(documents):
            try:
                record = self.runtime.documents.get(document_id)
            except UnknownDocument:
                record = None
            if record is None or not caller.owns(record) or not (
                    caller.may("admin") or namespace_of(record) in caller.namespaces()):
                raise field_error("knowledge", "unknown_document", f"no document {document_id}")
        return Choice(namespaces, frozenset(documents), frozenset(knowledge) - documents)

    def held(self, version: int | None, choice: Choice) -> int:
        """The version a chosen request runs on (the one asked, or the current one), checked to hold everything the
        choice names: 422 otherwise."""
        serving = self.serving()
        version = serving.current if version is None else version
        with serving.pinned(version, self.loader(version)) as version:
            try:
                serving.routes(version, "", choice)
            except UnknownKnowledge as exc:
                raise field_error("knowledge", "not_in_version",
                                  f"version {version} holds no document or subject named {exc}; documents of a "
                                  "per-document method can be chosen, by id or by subject") from None
        return version

    def text_of(self, document_id: str) -> Read | None:
        """A routed document's text and the answers it replaced (None for one erased since the route was decided)."""
        try:
            record = self.runtime.documents.get(document_id)
        except UnknownDocument:
            return None
        if record.get("text") is None:
            return None
        return Read(record["text"], tuple(r["answer"] for r in record.get("replaces") or []))

    def accepted(self, version: int | None, choice: Choice,
                 by_subject: bool = True) -> Callable[[str], list[dict[str, Any]]]:
        """The documents not learned yet a prompt reaches as context: for a request that routes on the current
        version (service/accepted.py); `by_subject`: also those about a known subject it names."""
        if version is not None or choice.named:
            return lambda prompt: []
        keys = self._accepted.keys(self.runtime.documents, choice.namespaces, self.serving().per_document)
        return lambda prompt: self._accepted.reached(prompt, keys, MAX_DOCUMENTS, by_subject)

    def loader(self, version: int | None) -> Callable[[], VersionKnowledge] | None:
        """How to load `version` if the served model does not hold it (None for version 0, always held)."""
        return (lambda: resolve(self.runtime.versions, version)) if version else None

    def stream(self, ids: list[int], params: SamplingParams, version: int | None = None,
               knowledge: Chosen = "auto", caller: Caller | None = None,
               knowledge_as: KnowledgeAs | None = None) -> Admitted:
        """Text pieces, then the Generation. Checked now, before a streamed response sends anything: 404 for a
        version that cannot be asked, 422 for knowledge it does not hold or the caller may not name, 429 when as
        many generations run and wait as the settings allow. `knowledge_as`: the knowledge as weights, as the
        documents' text before the prompt, or both ways at once (service/in_context.py); None: the server's."""
        knowledge_as = knowledge_as or self.knowledge_as
        scheduler = self.scheduler()
        version = self.version(version)
        choice = self.choice(knowledge, caller)
        if knowledge == "off":
            if version:
                raise field_error("knowledge", "pinned_version", f"off answers with version 0, not the version "
                                                                 f"asked ({version}): ask the current one or 0")
            version = 0
        owner = caller.owner if caller else None
        key_slot = self._key_slot(owner)  # before any work for the request: a 429 costs nothing
        if not self._admitted.acquire(blocking=False):
            key_slot()
            s = self.settings.limits
            raise busy(f"{s.max_concurrent_generations} generations are running and {s.max_waiting_generations} "
                       "waiting", retry_after_s=1)
        self.metrics.admitted.inc()
        slot = Slot(self._admitted, lambda: (self.metrics.admitted.dec(), key_slot()))
        made: InContext | None = None
        try:
            if choice.named and knowledge != "off":
                version = self.held(version, choice)
            load = self.loader(version)
            if knowledge_as != "weights":
                by_subject = knowledge_as != "auto"  # auto reads only the documents the prompt is routed to
                made = with_context(self.serving(), ids, version, load, choice, self.text_of,
                                    self.settings.limits.max_prompt_tokens, self.accepted(version, choice, by_subject),
                                    by_subject)
        except BaseException:
            slot.release()
            raise
        cancel = threading.Event()  # set by close(), from any thread: the decoder retires the sequence

        def decoded(prompt_ids: list[int], asked: Choice, sampling: SamplingParams = params,
                    on_retire: Callable[[], None] | None = slot.release) -> Iterator[str | Generation]:
            return scheduler.stream(prompt_ids, sampling, version, load, on_retire, asked, cancel, owner)

        def pieces() -> Iterator[str | Generation]:
            try:
                with closing(answers(decoded, ids, choice, params, made, knowledge_as)) as items:
                    for item in items:
                        if isinstance(item, Generation):
                            self.metrics.generation(item.timing["first_token_s"], item.completion_tokens)
                            item.knowledge_as, item.answered_as = knowledge_as, item.answered_as or knowledge_as
                        yield item
            finally:
                slot.release()
        return Admitted(pieces(), slot, cancel)

    def _key_slot(self, owner: str | None) -> Callable[[], None]:
        """One of a key's generation places (429 past CKL_LIMITS_MAX_GENERATIONS_PER_KEY: one key cannot hold every
        place, its long prompts waiting their share), and how to give it back; none is counted without keys."""
        if owner is None:
            return lambda: None
        cap = self.settings.limits.max_generations_per_key
        with self._per_key_lock:
            if self._per_key.get(owner, 0) >= cap:
                raise busy(f"this key has {cap} generations running or waiting", retry_after_s=1)
            self._per_key[owner] = self._per_key.get(owner, 0) + 1

        def give_back() -> None:
            with self._per_key_lock:
                if (left := self._per_key.pop(owner) - 1) > 0:
                    self._per_key[owner] = left
        return give_back


Decoded = Callable[..., Iterator[str | Generation]]  # a prompt's ids and choice (and sampling, on_retire) decoded


def answers(decoded: Decoded, ids: list[int], choice: Choice, params: SamplingParams, made: InContext | None,
            knowledge_as: KnowledgeAs) -> Iterator[str | Generation]:
    """The request's pieces and Generation with its knowledge as asked: as weights (the prompt as sent), as context
    (`made`), or both ways at once (both, auto), the surer answer given whole (in_context.surer). Both ways with no
    document to read is the prompt as sent, decoded once: nothing is routed to it that its text would not also be."""
    if knowledge_as in ("both", "auto") and made is not None and made.documents:
        result = surer(lambda i, c: decoded(i, c, replace(params, confidence=True), None), made, ids, choice)
        yield from (result.text, result) if result.text else (result,)
    elif knowledge_as in ("both", "auto"):
        for item in decoded(ids, choice):
            if isinstance(item, Generation):
                item.answered_as = "weights"
            yield item
    elif made is not None:
        for item in decoded(made.ids, made.choice):
            if isinstance(item, Generation):
                item.context = made.documents
            yield item
    else:
        yield from decoded(ids, choice)


def citation(result: Generation, knowledge: Chosen) -> dict[str, Any]:
    """What an answer reports of the knowledge it used: its version, what the request chose, each document (with
    its route score and the key terms the prompt named) or method whose delta was on, and the documents whose text
    went before the prompt."""
    return Knowledge(version=result.knowledge_version, chosen=knowledge, used=result.used,
                     knowledge_as=result.knowledge_as, context=result.context,
                     answered_as=result.answered_as).model_dump()


class Slot:
    """An admitted generation's place under the caps. Given back once, by whichever comes first: the decoder
    retiring its sequence, its consumer finishing or closing it, or the response that streams it ending (a client
    gone: a response cancelled mid-stream never resumes the iterator it was reading)."""

    def __init__(self, semaphore: threading.BoundedSemaphore, on_release: Callable[[], None]) -> None:
        self._semaphore = semaphore
        self._on_release = on_release
        self._lock = threading.Lock()
        self._held = True

    def release(self) -> None:
        with self._lock:
            if not self._held:
                return
            self._held = False
        self._semaphore.release()
        self._on_release()


class Admitted(Iterator[str | Generation]):
    """An admitted generation's text pieces, then its Generation. `close` may be called from any thread and more
    than once: it gives the slot back and stops the decoding at its next step."""

    def __init__(self, pieces: Generator[str | Generation, None, None], slot: Slot, cancel: threading.Event) -> None:
        self._pieces = pieces
        self._slot = slot
        self._cancel = cancel

    def __next__(self) -> str | Generation:
        return next(self._pieces)

    def close(self) -> None:
        self._slot.release()
        self._cancel.set()  # the decoder retires it at its next round, even while another thread reads it
        with suppress(ValueError):  # being read in another thread: the cancel above stops it
            self._pieces.close()
