"""Fault injection for the crash tests. `CKL_FAULT_KILL_AT=<point>` makes the process kill itself with SIGKILL
when it reaches that named point, so a test can crash a real worker between two writes, a moment no signal
sent from outside can be timed to hit. Unset, as everywhere but those tests, it does nothing.

The points, in the order a document passes them: `training` (the document marked training, before the first
step), `before_commit` (the gate accepted), `commit_renamed` (the version folder is in place, the pointer not
yet moved), `after_commit` (the pointer moved, the document's record not yet updated); and in an erasure,
`erasing` (the record scrubbed, the rest not yet).
"""
from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

POINTS = ("training", "before_commit", "commit_renamed", "after_commit")  # a learning job's, in order
ERASURE_POINTS = ("erasing",)


def kill_point(name: str) -> None:
    assert name in POINTS or name in ERASURE_POINTS, name
    if os.environ.get("CKL_FAULT_KILL_AT") == name:
        log.error("fault injection: killed at %s", name)
        os.kill(os.getpid(), signal.SIGKILL)
