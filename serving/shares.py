"""A key's share of the decoder: how long its long work (a long prompt's prefill, a preview) makes its next wait,
and whether a waiting sequence waits another round (serving/batching.py: Long prompts)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from serving.batching import Sequence

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
