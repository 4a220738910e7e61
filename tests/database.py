"""What the data folder's database holds, read with Python's own sqlite3 (not through the store under test)."""
from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path


def rows(data_dir: Path, query: str, *params: object) -> list[tuple]:
    with closing(sqlite3.connect(data_dir / "ckl.db")) as connection:
        return connection.execute(query, params).fetchall()
