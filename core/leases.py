"""Locks held across processes: a file lock in the data folder on one machine, PostgreSQL's session advisory lock
where processes share no folder. The server drops a session's advisory locks when its connection closes, so a
process killed while holding one holds it no more."""
from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from pathlib import Path

from filelock import FileLock
from sqlalchemy import Connection, Engine, text

LEARNER_LEASE = 0x636B6C01  # the advisory locks' numbers: constants the deployment uses for nothing else
PROBES_LOCK = 0x636B6C02
MEMORY_LOCK = 0x636B6C03


class AdvisoryLease:
    """PostgreSQL's advisory lock `key`, held on a connection of its own; re-entered by the thread holding it."""

    def __init__(self, engine: Engine, key: int) -> None:
        self.engine, self.key = engine, key
        self._thread = threading.RLock()  # the process's threads wait here, one session lock per process
        self._depth = 0
        self._connection: Connection | None = None

    def __enter__(self) -> AdvisoryLease:
        self._thread.acquire()
        if self._depth == 0:
            try:
                # Autocommit: a session idle in an open transaction for a whole job could be ended by the server's
                # idle_in_transaction_session_timeout, and the lock with it, unknown to its holder.
                self._connection = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
                self._connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": self.key})
            except BaseException:
                self._drop()
                self._thread.release()
                raise
        self._depth += 1
        return self

    def __exit__(self, *_exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._drop()
        self._thread.release()

    def _drop(self) -> None:
        """Close the lock's connection: the server releases the lock with its session."""
        if self._connection is not None:
            self._connection.invalidate()  # not back to the pool, where its session (and lock) would live on
            self._connection.close()
            self._connection = None


def lease(engine: Engine | None, key: int, folder: Path, name: str) -> AbstractContextManager:
    """An advisory lock on a PostgreSQL `engine`, else a file lock `name` in `folder` (one machine)."""
    if engine is not None and engine.dialect.name == "postgresql":
        return AdvisoryLease(engine, key)
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(str(folder / name))
