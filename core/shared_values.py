"""Named JSON values every process reads alike (the probe suites, core/probes.py): files in a folder on one
machine, rows of the database where processes share no folder."""
from __future__ import annotations

import json
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from filelock import FileLock
from sqlalchemy import Engine, insert, select, update

from core.database import lock_writers, shared_values
from core.fileio import read_json, write_json_atomic


class Values(Protocol):
    lock: AbstractContextManager  # held by a read that decides a write

    def read(self, name: str, default: Any = None) -> Any: ...

    def write(self, name: str, value: Any) -> None: ...


class FolderValues:
    """`<name>.json` in `root`, each replaced whole."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.lock = FileLock(str(root / ".lock"))

    def read(self, name: str, default: Any = None) -> Any:
        return read_json(self.root / f"{name}.json", default)

    def write(self, name: str, value: Any) -> None:
        write_json_atomic(self.root / f"{name}.json", value)


class TableValues:
    """Rows of the `shared_values` table; `lock` is a lock across processes (core/leases.py)."""

    def __init__(self, engine: Engine, lock: AbstractContextManager) -> None:
        self.engine, self.lock = engine, lock

    def read(self, name: str, default: Any = None) -> Any:
        with self.engine.connect() as connection:
            stored = connection.execute(select(shared_values.c.value).where(shared_values.c.name == name)).scalar()
        return default if stored is None else json.loads(stored)

    def write(self, name: str, value: Any) -> None:
        with self.engine.begin() as connection:
            lock_writers(connection, before_reading=True)  # no two processes insert one name
            row = update(shared_values).where(shared_values.c.name == name).values(value=json.dumps(value))
            if not connection.execute(row).rowcount:
                connection.execute(insert(shared_values).values(name=name, value=json.dumps(value)))
