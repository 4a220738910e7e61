"""A key's share of the decoder: how long its long work (a long prompt's prefill, a preview) makes its next wait,
and whether a waiting sequence waits another round (serving/batching.py: Long prompts)."""
from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from serving.rows import Prefilling, Sequence

FREE_PREFILL_TOKENS = 256  # a prompt this long or shorter (a question, a paragraph as context) is never held back


def owed_wait(seconds: float, share: float) -> float:
    """How long a key waits after work of `seconds` on the decoder, so that its work takes at most `share` of it."""
    return seconds * (1 / share - 1)


def held_back(sequence: Sequence, others: set[str | None], free_tokens: int, until: dict[str | None, float],
              now: float) -> bool:
    """Whether a waiting sequence waits another round: a long prompt whose sender's last long prefill has not been
    paid for yet, while other senders' answers decode or wait (`others`: the senders of both)."""
    return len(sequence.prompt_ids) > free_tokens and until.get(sequence.sender, -math.inf) > now \
        and bool(others - {sequence.sender})


class LongPrompts:
    """The long prompts being prefilled a chunk a round, and when each sender's next chunk may run."""

    def __init__(self, share: float, free_tokens: int) -> None:
        self.share, self.free_tokens = share, free_tokens
        self.prefilling: list[Prefilling] = []
        self.until: dict[str | None, float] = {}  # per sender (a configured key's owner: a bounded set)

    def is_long(self, sequence: Sequence) -> bool:
        return len(sequence.prompt_ids) > self.free_tokens

    def held_back(self, sequence: Sequence, others: set[str | None], now: float) -> bool:
        return held_back(sequence, others, self.free_tokens, self.until, now)

    def is_last_chunk(self, prefilling: Prefilling) -> bool:
        """Whether the prompt's next chunk is its last (the one that gives its first token and takes a row)."""
        return prefilling.done + self.free_tokens >= len(prefilling.sequence.prompt_ids)

    def places(self, rows: int, cap: int) -> dict[bool, int]:
        """How many sequences may be admitted now, by whether they are long, with `rows` of `cap` decoding rows taken:
        short ones to the rows left, less those kept for the long prompts whose last chunk is next; long ones to be
        prefilled beside the rows, `cap` at most."""
        return {False: cap - rows - sum(map(self.is_last_chunk, self.prefilling)), True: cap - len(self.prefilling)}

    def next_chunks(self, decoding: set[str | None], free_rows: int) -> Iterator[Prefilling]:
        """The prefills whose next chunk runs this round, at most one a sender: those whose sender owes no time, or
        whom no other sender's answer waits for (`decoding`: the senders of the answers decoding); a last chunk only
        while one of the `free_rows` decoding rows is left for it. Each chunk the caller runs before asking for the
        next is charged to its sender while others decode."""
        ran: set[str | None] = set()
        for prefilling in list(self.prefilling):
            sender = prefilling.sequence.sender
            others = decoding - {sender}
            if sender in ran or (others and self.until.get(sender, -math.inf) > time.monotonic()):
                continue
            if self.is_last_chunk(prefilling):
                if free_rows <= 0:
                    continue
                free_rows -= 1
            ran.add(sender)
            clock = time.monotonic()
            yield prefilling
            if others:  # a sender alone on the decoder owes nobody
                now = time.monotonic()
                self.until[sender] = now + owed_wait(now - clock, self.share)
