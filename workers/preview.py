"""Auto-probes previewed before a document is sent: the ones the learner will make for it, with phi's weights read
on the served model's version 0 (phi reads the frozen base model, as in the learner). The API holds one, built by
the command that starts it; nothing is stored or queued."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch

from core.layout import laid_out
from core.model.served_model import ServingModel
from core.settings import Settings
from workers import examples
from workers.threads import threads_here
from workers.train_attention.phi import PhiMismatch, TrainAttention, checkpoint_for


class AutoProbePreview:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._phi: TrainAttention | None = None
        self._lock = threading.Lock()

    def __call__(self, serving: ServingModel, text: str, method: str,
                 after_window: Callable[[float], None] = lambda seconds: None) -> list[tuple[str, str]] | None:
        """The probes the learner would make for `text` taught with `method`; None where it would make none (a phi
        that does not fit the model: the learner fails such a document). phi's pass over each window of the text is
        one step of the decoder's, and `after_window` is told how long each took (the caller's pause to share the
        decoder); without a phi for the model every token weighs the same, as in the learner. The calling thread
        computes on one OpenMP thread from now on (workers/threads.py: threads_here)."""
        threads_here(1)
        text = laid_out(text)  # as the learner reads it
        path = checkpoint_for(self.settings.training.phi_checkpoint, serving.name)
        doc = examples.encode(serving.tokenizer, text)
        if path is None:
            return examples.checkable_auto_probes(doc, [1.0] * len(doc.ids),
                                                  examples.unreachable(method, text, self.settings))
        with self._lock:
            if self._phi is None:
                try:
                    self._phi = TrainAttention.from_path(serving.model, path)
                except PhiMismatch:  # the learner fails such a document, with the reason on its record
                    return None
        phi = self._phi

        def each_window(work: Callable[[], torch.Tensor]) -> torch.Tensor:
            clock = time.monotonic()
            # One window's pass at a time under the decoder's lock: decoding goes on between two windows.
            features = serving.run(0, lambda model: work())
            after_window(time.monotonic() - clock)
            return features

        weights = phi.weights(doc.ids, each_window)
        return examples.checkable_auto_probes(doc, weights, examples.unreachable(method, text, self.settings))

