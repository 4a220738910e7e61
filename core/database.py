"""The database that holds document records and idempotency keys, and with an object store the versions and the
probe suites too (core/storage.py): SQLite in the data folder by default (no server to run), any SQLAlchemy URL
otherwise (CKL_DATABASE_URL): PostgreSQL where several machines share one store (`postgresql+psycopg://...`, the
`postgres` extra).

A record is its JSON in one column; the columns the service filters, sorts and sums by sit beside it, indexed.
"""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    text,
)

metadata = MetaData()
WRITERS_LOCK = 0x636B6C  # the advisory lock's number: any constant the deployment uses for nothing else

documents = Table(
    "documents", metadata,
    Column("document_id", String(32), primary_key=True),
    Column("seq", Integer, nullable=False),  # the order records were made in (created_at can tie)
    Column("created_at", Float, nullable=False),
    Column("status", String(16), nullable=False),
    Column("owner", String(160)),  # a key's name, after its namespace and "/" for a tenant's (core/keys.py)
    Column("job_id", String(64)),
    # A finished job's seconds, summed by /metrics without reading the records.
    Column("train_s", Float), Column("gate_s", Float), Column("score_before_s", Float),
    Column("record", Text, nullable=False),
    Index("documents_by_status", "status", "seq"),
    Index("documents_by_owner", "owner", "seq"),
    Index("documents_by_seq", "seq", unique=True),
    Index("documents_timings", "train_s", "gate_s", "score_before_s"),  # /metrics sums it, not the records
)

idempotency = Table(
    "idempotency", metadata,
    Column("key_hash", String(64), primary_key=True),
    Column("document_id", String(32), nullable=False, index=True),
    Column("body_sha256", String(64), nullable=False),
)

# The erasures owed and not finished (core/erasure.py): a row is written with an owner's withdrawal, or as an erasure
# starts, and deleted once it ends, so an erasure a crash cut short is found and finished at the next start.
erasures_owed = Table(
    "erasures_owed", metadata,
    Column("document_id", String(32), primary_key=True),
    Column("removed_in", Integer),  # the removal's version for a removed document; None for one no version holds
)

# The version store's tables (core/version_tables.py), used where CKL_OBJECT_STORE_URL is set.
versions = Table(
    "versions", metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("parent", Integer, nullable=False),
    Column("manifest", Text, nullable=False),  # its JSON; "" once erasure emptied one that could not be read
)

version_pointer = Table(  # one row: the served version, and counters every change moves (a reader's caches)
    "version_pointer", metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("current", Integer, nullable=False),
    Column("changes", Integer, nullable=False),
    Column("rewrites", Integer, nullable=False),
)

version_events = Table(
    "version_events", metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("version", Integer, nullable=False),
    Column("from_version", Integer),
    Column("event", String(32), nullable=False),
    Column("at", Float, nullable=False),
)

shared_values = Table(  # core/shared_values.py: the probe suites where processes share no folder
    "shared_values", metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'ckl.db'}"


def connect(url: str) -> Engine:
    """An engine on `url` with the tables made. SQLite: write-ahead log (readers do not wait for the writer), every
    commit synced (an accepted document survives a power cut), freed pages zeroed (an erased text leaves no bytes
    behind), and writers wait for each other instead of failing."""
    engine = create_engine(url, future=True)
    if engine.dialect.name == "sqlite":
        @event.listens_for(engine, "connect")
        def _pragmas(connection, _record) -> None:
            cursor = connection.cursor()
            for pragma in ("journal_mode=WAL", "synchronous=FULL", "secure_delete=ON", "busy_timeout=30000"):
                cursor.execute(f"PRAGMA {pragma}")
            cursor.close()
    with engine.begin() as connection:  # one process at a time checks for the tables and makes them
        lock_writers(connection, before_reading=True)
        metadata.create_all(connection)
    return engine


def lock_writers(connection: Connection, before_reading: bool = False) -> None:
    """Serialize the store's write transactions across machines: PostgreSQL's transaction-scoped advisory lock.
    SQLite allows one writer at a time anyway, but takes its lock at the first write; `before_reading` takes it
    first, for a transaction whose reads decide its writes (processes starting on a new file would all find no
    tables, and all but one fail to make them)."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": WRITERS_LOCK})
    elif before_reading and connection.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def truncate_log(engine: Engine) -> None:
    """Fold SQLite's write-ahead log into the database and empty it: the old pages it holds (an erased record's
    text) go with it."""
    if engine.dialect.name == "sqlite":
        with engine.connect() as connection:
            connection.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
