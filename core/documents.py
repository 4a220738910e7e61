"""The document store: every accepted document is a record in the database (core/database.py), written before it
is queued.

Its status changes only through `move` and its conditional cases (`claim`, `withdraw`, `to_gate`, `to_commit`),
along the lifecycle in core/lifecycle.py. A record in a pending status after a crash is picked up again by whichever
worker starts next. Writes are serialized by a lock across this machine's processes, and by the database's lock
where it has one (PostgreSQL).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock
from sqlalchemy import Connection, delete, func, insert, select, update

from core import database
from core.database import documents as table
from core.database import erasures_owed, idempotency
from core.fileio import read_json
from core.lifecycle import FINAL, PENDING, Status, transition

TIMED = ("train_s", "gate_s", "score_before_s")  # a finished job's seconds, in columns of their own (/metrics)
IS_PENDING = table.c.status.in_([s.value for s in PENDING])
# A pending document its owner withdrew is still pending (its worker ends it) but no longer read or counted.
NOT_WITHDRAWN = table.c.document_id.not_in(select(erasures_owed.c.document_id))


class IdempotencyConflict(Exception):
    """The idempotency key was used before with a different body."""


class UnknownDocument(Exception):
    pass


def body_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def key_hash(idempotency_key: str) -> str:
    return hashlib.sha256(idempotency_key.encode()).hexdigest()


def columns(record: dict[str, Any]) -> dict[str, Any]:
    """The row of a record: the JSON, and the fields the service filters, sorts and sums by."""
    timings = record.get("timings") or {}
    return {"document_id": record["document_id"], "created_at": record["created_at"], "status": record["status"],
            "owner": record.get("owner"), "job_id": record.get("job_id"),
            **{key: timings.get(key) for key in TIMED}, "record": json.dumps(record, ensure_ascii=False)}


def queued(record: dict[str, Any]) -> bool:
    return record["status"] == Status.QUEUED and not record.get("removes")


def learning(record: dict[str, Any]) -> bool:
    """A document a worker trains or gates, not committing yet: its owner may still withdraw it."""
    return record["status"] in (Status.TRAINING, Status.EVALUATING) and not record.get("removes") \
        and not record.get("committing")


def not_withdrawing(record: dict[str, Any]) -> bool:
    return not record.get("withdrawing")


def owe(connection: Connection, document_id: str, removed_in: int | None) -> None:
    """The document's erasure owed, in the transaction of `connection` (core/erasure.py)."""
    no_longer_owed(connection, document_id)
    connection.execute(insert(erasures_owed).values(document_id=document_id, removed_in=removed_in))


def no_longer_owed(connection: Connection, document_id: str) -> None:
    connection.execute(delete(erasures_owed).where(erasures_owed.c.document_id == document_id))


def last_seq(connection: Connection) -> int:
    return connection.scalar(select(func.max(table.c.seq))) or 0


def store_record(connection: Connection, record: dict[str, Any]) -> None:
    connection.execute(update(table).where(table.c.document_id == record["document_id"]).values(**columns(record)))


class DocumentStore:
    def __init__(self, root: Path, url: str | None = None) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.engine = database.connect(url or database.sqlite_url(root))
        self._lock = threading.Lock()
        self._file_lock = FileLock(str(root / ".documents.lock"))
        if (root / "documents").is_dir() or (root / "idempotency").is_dir():
            self._import_files()

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """One writer at a time: this machine's processes by the file lock, other machines' by the database's own
        lock where it has one (PostgreSQL), held to the end of the transaction."""
        with self._lock, self._file_lock, self.engine.begin() as connection:
            database.lock_writers(connection)
            yield connection

    def _import_files(self) -> None:
        """A data folder from before the database: its JSON records and idempotency files move in, once."""
        with self._writing() as connection:
            known = set(connection.scalars(select(table.c.document_id)))
            records = sorted((r for p in (self.root / "documents").glob("*.json") if (r := read_json(p))),
                             key=lambda r: r["created_at"])
            seq = last_seq(connection)
            for record in records:
                if record["document_id"] not in known:
                    seq += 1
                    connection.execute(insert(table).values(seq=seq, **columns(record)))
            keys = set(connection.scalars(select(idempotency.c.key_hash)))
            for path in (self.root / "idempotency").glob("*.json"):
                if path.stem not in keys and (entry := read_json(path)):
                    connection.execute(insert(idempotency).values(key_hash=path.stem, **entry))
        for folder in ("documents", "idempotency"):
            shutil.rmtree(self.root / folder, ignore_errors=True)

    def create(self, body: dict[str, Any], idempotency_key: str | None) -> tuple[dict[str, Any], bool]:
        """Store a new document; with a known key, return the earlier one (and False for 'not new')."""
        digest = body_hash(body)
        hashed = key_hash(idempotency_key) if idempotency_key else None
        with self._writing() as connection:
            if hashed is not None and (known := connection.execute(
                    select(idempotency).where(idempotency.c.key_hash == hashed)).first()) is not None:
                if known.body_sha256 != digest:
                    raise IdempotencyConflict("idempotency_key was already used with a different document")
                return self._read(connection, known.document_id), False
            now = time.time()
            record = {"document_id": uuid.uuid4().hex[:16], **body, "status": Status.QUEUED.value, "attempts": 0,
                      "progress": {"step": 0, "steps": 0}, "created_at": now, "updated_at": now, "job_id": None,
                      "version": None, "gate": None, "scores": None, "error": None, "timings": {}}
            connection.execute(insert(table).values(seq=last_seq(connection) + 1, **columns(record)))
            if hashed is not None:
                connection.execute(insert(idempotency).values(key_hash=hashed, document_id=record["document_id"],
                                                              body_sha256=digest))
            return record, True

    def replace(self, document_id: str, rewrite: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Write `rewrite(record)` in the record's place, its status unchanged (erasure: fields dropped, not
        set)."""
        with self._writing() as connection:
            record = rewrite(self._read(connection, document_id, lock=True))
            record.update(document_id=document_id, updated_at=time.time())
            store_record(connection, record)
            return record

    def forget_idempotency(self, document_id: str) -> None:
        """Delete the idempotency keys that name the document (each holds a hash of its body)."""
        with self._writing() as connection:
            connection.execute(delete(idempotency).where(idempotency.c.document_id == document_id))

    def idempotency_count(self, document_id: str) -> int:
        """How many idempotency keys name the document."""
        with self.engine.connect() as connection:
            return connection.scalar(select(func.count()).select_from(idempotency)
                                     .where(idempotency.c.document_id == document_id))

    def truncate_log(self) -> None:
        """Drop the old pages of the database's log, which still hold what was rewritten (an erased text)."""
        database.truncate_log(self.engine)

    def discard(self, document_id: str, idempotency_key: str | None) -> None:
        """Take back a record `create` just made (its job could not be queued): a refused request stores nothing."""
        with self._writing() as connection:
            connection.execute(delete(table).where(table.c.document_id == document_id))
            if idempotency_key:
                connection.execute(delete(idempotency).where(idempotency.c.key_hash == key_hash(idempotency_key)))

    def get(self, document_id: str) -> dict[str, Any]:
        with self.engine.connect() as connection:
            return self._read(connection, document_id)

    @staticmethod
    def _read(connection: Connection, document_id: str, lock: bool = False) -> dict[str, Any]:
        query = select(table.c.record).where(table.c.document_id == document_id)
        found = connection.scalar(query.with_for_update() if lock else query)
        if found is None:
            raise UnknownDocument(document_id)
        return json.loads(found)

    def update(self, document_id: str, **fields: Any) -> dict[str, Any]:
        """Write fields other than the status (that changes only through `move`)."""
        if "status" in fields:
            raise TypeError("DocumentStore.update does not write a status: use move() (core/lifecycle.py)")
        return self._write(document_id, fields)

    def move(self, document_id: str, status: Status, **fields: Any) -> dict[str, Any]:
        """Move the record to `status`, with `fields`, in one write; raises IllegalTransition (nothing written)
        when the lifecycle does not allow the move from the status the record has now."""
        return self._write(document_id, fields, status)

    def claim(self, document_id: str) -> dict[str, Any] | None:
        """A worker starts an attempt at the document: it moves to training, the attempt counted, in one write; None
        where it is final (learned, refused, or withdrawn since its job was queued), and nothing is written."""
        return self._write_if(document_id, lambda record: record["status"] not in FINAL,
                              lambda record: {"attempts": record["attempts"] + 1, "error": None,
                                              **({"committing": False} if record.get("committing") else {})},
                              Status.TRAINING)

    def withdraw(self, document_id: str) -> dict[str, Any] | None:
        """Refuse a queued document to teach before any worker starts it (its owner's DELETE), in one write: no
        worker can claim it after, nor it be withdrawn once claimed. None where it is not queued."""
        return self._write_if(document_id, queued,
                              lambda record: {"error": "withdrawn before it was learned", "withdrawn": True},
                              Status.REJECTED, owed=True)

    def ask_to_withdraw(self, document_id: str) -> dict[str, Any] | None:
        """Its owner's withdrawal of a document a worker is training or gating (DELETE), marked on the record in one
        write; the worker finds the mark when it would take the candidate to the gate (`to_gate`) or commit it
        (`to_commit`), and rejects it instead. None where it is neither (queued: `withdraw`; committing: `ask_to_remove`;
        final: too late to ask). Both withdrawals owe the erasure in the same write (`owe_erasure`)."""
        return self._write_if(document_id, learning, lambda record: {"withdrawing": True}, owed=True)

    def ask_to_remove(self, document_id: str) -> dict[str, Any] | None:
        """Its owner's DELETE of a document being committed, or whose commit a version holds though its record is
        behind (its worker died): marked withdrawing, its erasure owed, in one write, and a removal queued by the
        caller. The removal ends the commit first (workers/stages/removal.py: settle): where a version holds the
        document it is committed, then removed; else withdrawn, so no new attempt learns it again. None where it
        is final."""
        return self._write_if(document_id, lambda record: record["status"] in PENDING,
                              lambda record: {"withdrawing": True}, owed=True)

    def take_back_removal(self, document_id: str) -> dict[str, Any] | None:
        """`ask_to_remove` undone where its removal could not be queued (503): the mark and the erasure owed dropped
        in one write while the document is pending, so its commit ends as if no DELETE had come. None where it is
        final since (its worker withdrew it: erased, as its owner asked)."""
        return self._write_if(document_id, lambda record: record["status"] in PENDING and record.get("withdrawing"),
                              lambda record: {"withdrawing": False}, owed=False)

    def to_gate(self, document_id: str) -> dict[str, Any] | None:
        """A worker takes its trained candidate to the gate (evaluating), in one write; None where its owner asked
        to withdraw it meanwhile (`ask_to_withdraw`), and nothing is written: one of the two comes first, whole."""
        return self._write_if(document_id, not_withdrawing, lambda record: {}, Status.EVALUATING)

    def to_commit(self, document_id: str) -> dict[str, Any] | None:
        """A worker commits the candidate its gate accepted (`committing`, until the record says committed), in one
        write; None where its owner asked to withdraw it during the gate, and nothing is written."""
        return self._write_if(document_id, not_withdrawing, lambda record: {"committing": True})

    def _write(self, document_id: str, fields: dict[str, Any], status: Status | None = None) -> dict[str, Any]:
        return self._write_if(document_id, lambda record: True, lambda record: fields, status)

    def _write_if(self, document_id: str, when: Callable[[dict[str, Any]], bool],
                  fields: Callable[[dict[str, Any]], dict[str, Any]],
                  status: Status | None = None, owed: bool | None = None) -> dict[str, Any] | None:
        """One write of `fields(record)` (and `status`, and the erasure owed, or no longer: `owed`), if
        `when(record)`: both read under the lock, so another writer's move comes before or after this one, whole.
        None: not written."""
        with self._writing() as connection:
            record = self._read(connection, document_id, lock=True)
            if not when(record):
                return None
            changed = fields(record)
            if status is not None:  # checked under the lock, against the status stored
                changed = {**changed, "status": transition(record["status"], status).value}
            record.update(changed, updated_at=time.time())
            store_record(connection, record)
            if owed:
                owe(connection, document_id, None)
            elif owed is False:
                no_longer_owed(connection, document_id)
            return record

    def owe_erasure(self, document_id: str, removed_in: int | None) -> None:
        """Note that the document is to be erased (`removed_in`: its removal's version), until `erasure_finished`."""
        with self._writing() as connection:
            owe(connection, document_id, removed_in)

    def erasure_finished(self, document_id: str) -> None:
        with self._writing() as connection:
            no_longer_owed(connection, document_id)

    def erasures_owed(self, document_id: str | None = None) -> list[tuple[str, int | None]]:
        """(document id, removal's version) of each erasure owed and not finished (of `document_id`'s alone)."""
        query = select(erasures_owed)
        with self.engine.connect() as connection:
            return [tuple(row) for row in connection.execute(
                query if document_id is None else query.where(erasures_owed.c.document_id == document_id))]

    def _records(self, query) -> list[dict[str, Any]]:
        with self.engine.connect() as connection:
            return [json.loads(r) for r in connection.scalars(query.order_by(table.c.seq))]

    def page(self, owner: str | None, offset: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
        """The records of `owner` (None: everyone's), oldest first, from `offset`: how many in all, and those."""
        mine = (table.c.owner == owner) if owner is not None else True
        with self.engine.connect() as connection:
            total = connection.scalar(select(func.count()).select_from(table).where(mine))
        return total, self._records(select(table.c.record).where(mine).offset(offset).limit(limit))

    def mentioning(self, text: str) -> list[dict[str, Any]]:
        """The records whose JSON holds `text` somewhere (a document id another record names)."""
        return self._records(select(table.c.record).where(table.c.record.contains(text, autoescape=True)))

    def with_status(self, status: Status, last: int | None = None) -> list[dict[str, Any]]:
        """The records in `status`, oldest first; with `last`, only the newest `last` of them."""
        query = select(table.c.record).where(table.c.status == status.value)
        if last is None:
            return self._records(query)
        with self.engine.connect() as connection:
            newest = connection.scalars(query.order_by(table.c.seq.desc()).limit(last))
            return [json.loads(r) for r in newest][::-1]

    def counts(self) -> dict[str, int]:
        """Records per status."""
        with self.engine.connect() as connection:
            return dict(connection.execute(select(table.c.status, func.count()).group_by(table.c.status)).all())

    def pending_count(self, owner: str | None = None) -> int:
        """Records queued or in training (of `owner` alone, when named), but those their owners withdrew."""
        query = select(func.count()).select_from(table).where(IS_PENDING, NOT_WITHDRAWN)
        with self.engine.connect() as connection:
            return connection.scalar(query if owner is None else query.where(table.c.owner == owner))

    def timings(self) -> dict[str, tuple[int, float]]:
        """Per timing of a finished job: how many jobs have it, and their sum."""
        with self.engine.connect() as connection:
            row = connection.execute(select(*(f(table.c[k]) for k in TIMED for f in (func.count, func.sum)))).one()
        return {key: (row[2 * i], row[2 * i + 1] or 0.0) for i, key in enumerate(TIMED)}

    def pending(self) -> list[dict[str, Any]]:
        return self._records(select(table.c.record).where(IS_PENDING))

    def pending_ids(self) -> list[str]:
        """The pending records' ids, oldest first, but those their owners withdrew: what may be read as context,
        without reading every record."""
        with self.engine.connect() as connection:
            return list(connection.scalars(select(table.c.document_id).where(IS_PENDING, NOT_WITHDRAWN)
                                           .order_by(table.c.seq)))
