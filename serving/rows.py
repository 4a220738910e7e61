"""What the decoding thread keeps per request (serving/batching.py): a sequence being decoded, a group of them
sharing one forward pass, and a long prompt being prefilled a chunk at a time."""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import torch

from core.model.served_model import Routes
from serving.generation import Answer


@dataclass(eq=False)
class Sequence:
    """One request being decoded."""
    prompt_ids: list[int]
    version: int
    routes: Routes
    answer: Answer
    generator: torch.Generator | None
    release: Callable[[], None]  # unpins the version (and runs the submitter's on_retire); harmless twice
    started: float
    used: list[dict[str, Any]]  # the knowledge its routes use (ServingModel.cite)
    out: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)  # pieces, then the Generation or an error
    first_token_s: float = 0.0
    sender: str | None = None  # whose request (a key's owner): long prompts are shared out per sender
    # Set when its stream ended or was closed: retired at the next round.
    cancelled: threading.Event = field(default_factory=threading.Event)
    # The request's, set when the client went away (its consumer closed from another thread while one was blocked
    # reading): every decode of the request is retired, both ways of `knowledge_as: both` included. Not set when
    # one of those ends, which would cut the other short.
    request: threading.Event = field(default_factory=threading.Event)

    def gone(self) -> bool:
        return self.cancelled.is_set() or self.request.is_set()


@dataclass(eq=False)
class Group:
    """Sequences decoded by one forward pass: one version, one set of routes but those routed per row."""
    key: Hashable
    version: int
    routes: Routes
    rows: list[Sequence]
    cache: object  # a DynamicCache, one row per sequence
    mask: torch.Tensor  # [rows, columns]: 1 on tokens, 0 on left padding
    positions: torch.Tensor  # [rows]: each row's position of its next input token
    last: torch.Tensor  # [rows]: each row's last sampled token, its next input


@dataclass(eq=False)
class Prefilling:
    """A long prompt prefilled a chunk a round: its cache so far and how many of its tokens that holds."""
    sequence: Sequence
    cache: object = None
    done: int = 0
