"""The interface every update method implements.

A method owns a trainable knowledge state on top of the frozen base model. The learning job:
`load(parent delta)` -> `train(examples, own probes)` -> score `model` in the gate -> commit `delta()`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from service.knowledge.scoring import Probe
from service.settings import Settings

Progress = Callable[[int, int], None]


@dataclass
class Example:
    """One training window: token ids and the weight of each predicted token."""
    input_ids: list[int]
    weights: list[float]


@dataclass
class TrainReport:
    steps: int
    stopped_early: bool
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


class UpdateMethod(ABC):
    name: str

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: Settings) -> None:
        self.tokenizer = tokenizer
        self.settings = settings

    @property
    @abstractmethod
    def model(self) -> nn.Module:
        """The model with the method's current knowledge state: what the gate scores."""

    @abstractmethod
    def load(self, delta: dict[str, torch.Tensor] | None) -> None:
        """Set the knowledge state to a committed delta (None: version 0)."""

    @abstractmethod
    def train(self, examples: list[Example], budget: int, probes_pass: Callable[[], bool],
              progress: Progress) -> TrainReport:
        """Train from the loaded state; stop when `probes_pass()` or after `budget` steps."""

    @abstractmethod
    def delta(self) -> dict[str, torch.Tensor]:
        """The trained state as tensors for the version store."""

    @abstractmethod
    def manifest_fields(self) -> dict[str, Any]:
        """What a server needs to install the delta, and the hyperparameters, for the manifest."""
