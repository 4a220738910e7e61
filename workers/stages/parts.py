"""What every stage of a job works with: the settings, the stores, the model, and the learner's parts."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from core.documents import DocumentStore
from core.probes import ProbeSuites
from core.settings import Settings
from core.versions import VersionStore
from workers.held import Held
from workers.stages.scoring import Scorer
from workers.weigher import Weigher
from workers.yielding import Rests


@dataclass
class Parts:
    settings: Settings
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    documents: DocumentStore
    versions: VersionStore
    suites: ProbeSuites
    held: Held  # the methods, the version they hold, its scores
    scorer: Scorer
    weigher: Weigher
    rests: Rests
    publish: Callable[[int], None]  # announces a committed version
