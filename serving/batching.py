"""Continuous batching: one decoding thread runs every generation the API asks of the served model.

Each round, between two decoding steps, the thread retires the sequences whose client went away, admits
waiting ones up to the running cap (the prompts admitted together that may share a forward pass are prefilled
in one, left-padded; a prompt admitted alone is prefilled alone, so its first token is the one a lone request
gets), and then runs one forward pass per group for all of that group's sequences. Each sequence keeps its own
sampling parameters and seeded generator, stop strings, max_new_tokens and finish reason (serving/generation.py:
Answer), and leaves its group as soon as it is complete.

Groups. Most methods set the model's state for a whole forward pass (`use(version, route)`: the active adapter,
the memory rows written), so only sequences pinned to the same knowledge version with the same routes can share
one: each (version, routes) key is a group, and the groups are decoded in turn, one step each per round. The
routed method routes per row (`use_rows`: every row's own deltas in two batched products, as S-LoRA and
Punica do on a GPU), so its routes are left out of the key: prompts routed to different documents, or to none,
share one forward pass of the base model.

Cache. A group holds one batched KV cache, left-padded, with a 2D attention mask and per-row position ids
(serving/batch_cache.py). A sequence joining a group is padded on the left to the group's length, or
the group to the sequence's, whichever is shorter; a retired sequence's row is removed.

Sliding window. Gemma 3's sliding layers keep the last window - 1 cache columns and mask by column distance;
left padding moves all of a row's columns together, so a padded row sees exactly the keys it would see alone,
before and past the window. Sequences that run past the window are therefore merged like any other
(tests/test_batching.py checks it across the tiny model's 16-token window).

Exactness. Batched greedy decoding gives every sequence the tokens it gets alone, but not bit-identical fp32
logits: the CPU's matrix kernels differ by batch size, and a padded row takes the masked attention path (by
how much: docs/decisions.md, Continuous batching), so a near-tie between the two best tokens could still go
either way.

Long prompts. A prefill holds every running sequence back (seconds for thousands of tokens on a CPU). A prompt over
`free_tokens` is prefilled alone, `free_tokens` at a time, one chunk a round between the decoding steps of the others,
so an answer waits at most one chunk's time for each step. While other senders' answers decode, each chunk waits
(1 / prefill_share - 1) times as long as its sender's last chunk took (and a long prompt waits to be admitted while
its sender owes such time): a key sending long prompts takes at most that share of the decoder. A long prompt takes a
decoding row only for its last chunk, which gives its first token (a row it is owed is kept from the prompts waiting):
while its earlier chunks wait their turn, every row the cap allows decodes others' answers. At most `max_running`
long prompts are prefilled at once, beside the `max_running` rows.

Versions. A sequence pins its version when it is submitted and releases it when it is retired; `install`
takes the serving lock, which every forward pass holds, so a swap lands between two steps and a running
answer keeps its version. Versions pinned by running sequences form groups of their own.
"""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import ExitStack
from typing import Any

import torch

from core.heap import give_back
from core.model.served_model import ServingModel
from core.scoring import left_padded
from core.served import ROUTED, Choice
from core.state import Knowledge
from serving import batch_cache
from serving.generation import Answer, Generation, SamplingParams, eos_ids, sample_token, seeded
from serving.rows import Group, Prefilling, Sequence
from serving.shares import FREE_PREFILL_TOKENS, LongPrompts

BUSY_GAP_S = 1.0  # a pause in decoding shorter than this still counts as decoding (Scheduler.busy)


def give_back_when_idle(busy: Callable[[], bool]) -> None:
    """Once decoding has paused for BUSY_GAP_S, hand what the last burst freed back to the system: glibc's heaps (one
    per thread that allocated) keep freed pages, and RSS climbed by each burst's transients (docs/decisions.md:
    "Giving memory back when decoding pauses"). Not on every exit: a lone client's next request would fault the
    pages in again."""
    idle = threading.Timer(BUSY_GAP_S, lambda: busy() or give_back())
    # Not a daemon (it would inherit the decoder's): the process's exit waits for it, at most BUSY_GAP_S. A daemon
    # one still waiting at exit aborted the process now and then ("terminate called without an active exception").
    idle.daemon = False
    idle.start()


def decoding_rows(groups: dict[Hashable, Group]) -> int:
    """The decoding rows the groups take."""
    return sum(len(group.rows) for group in list(groups.values()))


class Scheduler:
    def __init__(self, serving: ServingModel, max_running: int, prefill_share: float = 1.0,
                 free_tokens: int = FREE_PREFILL_TOKENS) -> None:
        self.serving = serving
        self.max_running = max_running
        self.long = LongPrompts(prefill_share, free_tokens)
        self.stops = eos_ids(serving)
        self._lock = threading.Lock()  # guards _waiting and _thread
        self._waiting: deque[Sequence] = deque()
        self._groups: dict[Hashable, Group] = {}  # the decoding thread's own
        self._thread: threading.Thread | None = None
        self._active_at = -math.inf  # time.monotonic() of the decoder's last round

    def running(self) -> int:  # the sequences decoding and the long prompts being prefilled
        return decoding_rows(self._groups) + len(self.long.prefilling)

    def busy(self, within_s: float = BUSY_GAP_S) -> bool:
        """Whether a sequence runs or waits, or did `within_s` ago: between one client's request and its next the
        decoder may stop for a moment, and that is not an idle machine."""
        return self._thread is not None or time.monotonic() - self._active_at < within_s

    def waiting(self) -> int:
        return len(self._waiting)

    def stream(self, prompt_ids: list[int], params: SamplingParams, version: int | None = None,
               load: Callable[[], Knowledge] | None = None,
               on_retire: Callable[[], None] | None = None, choice: Choice = ROUTED,
               cancel: threading.Event | None = None, sender: str | None = None) -> Iterator[str | Generation]:
        """As generation.stream, decoded in the batch: text pieces, then the Generation. Pins the version (the
        current one, or `version`, loaded with `load()` if not held) on the first item; a consumer that stops
        iterating frees the sequence's row at the next round. `on_retire` runs when the sequence leaves the
        decoder (it ended, failed or was dropped), whether or not anyone reads what it left. `choice`: the
        knowledge the request may use (ServingModel.routes). `cancel`, set from any thread, retires it too: a
        generator being read in another thread cannot be closed from this one. `sender`: whose request it is (see
        Long prompts above)."""
        sequence = self._submit(prompt_ids, params, version, load, on_retire, choice, cancel or threading.Event(),
                                sender)
        try:
            while not isinstance(item := sequence.out.get(), Generation):
                if isinstance(item, BaseException):
                    raise item
                yield item
            yield item
        finally:
            sequence.cancelled.set()

    def _submit(self, prompt_ids: list[int], params: SamplingParams, version: int | None,
                load: Callable[[], Knowledge] | None, on_retire: Callable[[], None] | None,
                choice: Choice, cancel: threading.Event, sender: str | None) -> Sequence:
        started = time.perf_counter()
        pin = ExitStack()
        if on_retire is not None:
            pin.callback(on_retire)
        version = pin.enter_context(self.serving.pinned(version, load))
        try:
            routes, used = self.serving.decide(version, prompt_ids, choice)
        except BaseException:
            pin.close()
            raise
        sequence = Sequence(prompt_ids, version, routes, Answer(self.serving.tokenizer, params, self.stops),
                            seeded(params.seed), pin.close, started, used, request=cancel, sender=sender)
        with self._lock:
            self._waiting.append(sequence)
            if self._thread is None:  # the thread ends when nothing is left; the next request starts it again
                self._thread = threading.Thread(target=self._run, daemon=True, name="ckl-decoder")
                self._thread.start()
        return sequence

    def _run(self) -> None:
        admitted: list[Sequence] = []
        try:
            with torch.inference_mode():
                while (admitted := self._next_round()) is not None:
                    self._active_at = time.monotonic()
                    batches: dict[Hashable, list[Sequence]] = {}
                    for sequence in admitted:
                        if sequence.answer.finish_reason is not None:  # nothing to generate (max_new_tokens 0)
                            self._end(sequence)
                        elif self.long.is_long(sequence):  # alone, a chunk a round (no row padded to its length)
                            self.long.prefilling.append(Prefilling(sequence))
                        else:  # prefilled together where they may share a pass
                            batches.setdefault(self._key(sequence), []).append(sequence)
                    for batch in batches.values():
                        self._prefill(batch)
                    self._prefill_chunks()
                    for group in list(self._groups.values()):
                        self._step(group)
            give_back_when_idle(self.busy)
        except Exception as exc:  # a fault outside a forward pass: no request may be left waiting for it
            with self._lock:
                stranded = [s for group in self._groups.values() for s in group.rows] + admitted + list(self._waiting)
                stranded += [p.sequence for p in self.long.prefilling if p.sequence not in admitted]
                self._groups, self.long.prefilling, self._thread = {}, [], None
                self._waiting.clear()
            self._fail(stranded, exc)  # releasing a pin twice is harmless (ExitStack.close)
            raise

    def _next_round(self) -> list[Sequence] | None:
        """Retire the cancelled, take the sequences to admit; None (the thread ends) once nothing is left."""
        for group in list(self._groups.values()):
            if gone := [s for s in group.rows if s.gone()]:
                self._retire(group, gone)
        for prefilling in [p for p in self.long.prefilling if p.sequence.gone()]:
            self.long.prefilling.remove(prefilling)
            self._end(prefilling.sequence)
        with self._lock:
            for sequence in [s for s in self._waiting if s.gone()]:
                self._waiting.remove(sequence)
                self._end(sequence)  # a reader blocked on it (another thread) gets its end
            now, room = time.monotonic(), self.long.places(decoding_rows(self._groups), self.max_running)
            others = {s.sender for group in self._groups.values() for s in group.rows} | {
                s.sender for s in self._waiting}  # clients whose requests come back together may all be waiting
            admitted = []
            for sequence in list(self._waiting):
                if room[long := self.long.is_long(sequence)] > 0 and not self.long.held_back(sequence, others, now):
                    room[long] -= 1
                    self._waiting.remove(sequence)
                    admitted.append(sequence)
            if not admitted and not self._groups and not self.long.prefilling:
                self._thread = None
                return None
        return admitted

    def _prefill_chunks(self) -> None:
        """The next chunk of the long prompts whose turn it is (LongPrompts.next_chunks); a last chunk joins a group."""
        for prefilling in self.long.next_chunks({s.sender for group in self._groups.values() for s in group.rows},
                                                self.max_running - decoding_rows(self._groups)):
            if self._chunk(prefilling):
                self.long.prefilling.remove(prefilling)

    def _chunk(self, prefilling: Prefilling) -> bool:
        """Prefill the next `free_tokens` of a long prompt; whether it is done with (prefilled, or failed)."""
        sequence = prefilling.sequence
        end = min(prefilling.done + self.long.free_tokens, len(sequence.prompt_ids))
        ids = torch.tensor([sequence.prompt_ids[prefilling.done:end]], device=self.serving.device)
        try:
            out = self.serving.run(sequence.version, lambda m: m(input_ids=ids, cache=prefilling.cache, use_cache=True,
                                                                 logits_to_keep=1), sequence.routes)
        except Exception as exc:
            self._fail([sequence], exc)
            return True
        prefilling.cache, prefilling.done = out.cache, end
        if end < len(sequence.prompt_ids):
            return False
        self._join([sequence], out, torch.ones(1, end, dtype=torch.long, device=self.serving.device))
        return True

    def _key(self, sequence: Sequence) -> Hashable:
        """What sequences sharing a forward pass must share: the version, and the routes not routed per row."""
        return sequence.version, tuple(sorted(self.serving.shared_routes(sequence.routes).items()))

    def _prefill(self, ready: list[Sequence]) -> None:
        """The prompts of sequences with one key, left-padded into one forward pass; each row's first token, and
        the rows into their group (a prompt alone is not padded, so its first token is the one a lone request
        gets)."""
        ids, mask = left_padded([s.prompt_ids for s in ready], self.serving.device)
        padded = {"attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)} if len(ready) > 1 else {}
        try:
            out = self.serving.run(ready[0].version, lambda m: m(input_ids=ids, use_cache=True, logits_to_keep=1,
                                                                 **padded),
                                   ready[0].routes, [s.routes for s in ready] if padded else None)
        except Exception as exc:
            self._fail(ready, exc)
            return
        if padded and not batch_cache.batchable(out.cache):  # rows that cannot be split: each prompt alone
            for sequence in ready:
                self._prefill([sequence])
            return
        self._join(ready, out, mask)

    def _join(self, ready: list[Sequence], out: Any, mask: torch.Tensor) -> None:
        """Prefilled rows (`out`: their forward pass; `mask`: their columns): each row's first token, and the rows
        that go on into their group."""
        device = self.serving.device
        logits = out.logits[:, -1].float().cpu()
        tokens = [self._take(s, logits[i]) for i, s in enumerate(ready)]
        live = [i for i, s in enumerate(ready) if s.answer.finish_reason is None]
        for sequence in ready:
            if sequence.answer.finish_reason is not None:
                self._end(sequence)
        if not live:
            return
        if len(live) < len(ready):
            mask = batch_cache.keep_rows(out.cache, mask, torch.tensor(live, device=device))
        rows = [ready[i] for i in live]
        positions = torch.tensor([len(s.prompt_ids) for s in rows], device=device)
        last = torch.tensor([tokens[i] for i in live], device=device)
        # A cache that cannot be merged gets a group of its own (keyed by the sequence).
        key = self._key(rows[0]) if batch_cache.batchable(out.cache) else rows[0]
        if (group := self._groups.get(key)) is None:
            self._groups[key] = Group(key, rows[0].version, rows[0].routes, rows, out.cache, mask, positions, last)
            return
        group.cache, group.mask = batch_cache.merge(group.cache, group.mask, out.cache, mask)
        group.rows.extend(rows)
        group.positions = torch.cat([group.positions, positions])
        group.last = torch.cat([group.last, last])

    def _step(self, group: Group) -> None:
        """One token for every row of the group."""
        group.mask = torch.nn.functional.pad(group.mask, (0, 1), value=1)
        ids, mask, positions = group.last[:, None], group.mask, group.positions[:, None]
        try:
            out = self.serving.run(group.version, lambda m: m(
                input_ids=ids, attention_mask=mask, position_ids=positions, cache=group.cache, use_cache=True,
                logits_to_keep=1), group.routes, [s.routes for s in group.rows])
        except Exception as exc:
            del self._groups[group.key]
            self._fail(group.rows, exc)
            return
        group.positions = group.positions + 1
        logits = out.logits[:, -1].float().cpu()
        group.last = torch.tensor([self._take(s, logits[i]) for i, s in enumerate(group.rows)],
                                  device=self.serving.device)
        if done := [s for s in group.rows if s.answer.finish_reason is not None]:
            self._retire(group, done)

    def _take(self, sequence: Sequence, logits: torch.Tensor) -> int:
        params = sequence.answer.params
        token = sample_token(logits, params.temperature, params.top_p, sequence.generator)
        if not sequence.first_token_s:
            sequence.first_token_s = time.perf_counter() - sequence.started
        if piece := sequence.answer.add(token, logits):
            sequence.out.put(piece)
        return token

    def _retire(self, group: Group, leaving: list[Sequence]) -> None:
        keep = [i for i, s in enumerate(group.rows) if s not in leaving]
        if keep:
            rows = torch.tensor(keep, device=self.serving.device)
            group.mask = batch_cache.keep_rows(group.cache, group.mask, rows)
            group.positions, group.last = group.positions[rows], group.last[rows]
            group.rows = [group.rows[i] for i in keep]
        else:
            del self._groups[group.key]
        for sequence in leaving:
            self._end(sequence)

    def _end(self, sequence: Sequence) -> None:
        if piece := sequence.answer.rest():
            sequence.out.put(piece)
        sequence.release()  # before the Generation: a client that has its answer holds no version
        sequence.out.put(sequence.answer.result(len(sequence.prompt_ids), sequence.version, sequence.started,
                                                sequence.first_token_s, sequence.used))

    def _fail(self, sequences: list[Sequence], exc: Exception) -> None:
        for sequence in sequences:
            sequence.release()
            sequence.out.put(exc)
