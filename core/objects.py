"""Where deltas live when processes share no folder: an S3-compatible object store (CKL_OBJECT_STORE_URL), read
through a cache in the process's own data folder.

A delta is stored under a name of its own (its SHA-256 and a random suffix) and never changed, so a cached copy is
good for as long as it exists, and a reader checks the hash of what it got (core/version_tables.py). boto3 talks to
the store: it signs requests, retries, and reads credentials and endpoints the way every S3 tool does
(AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL_S3, ...).
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import suppress
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qs, urlparse

from core.fileio import write_bytes_atomic


class ObjectStore(Protocol):
    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes | None:
        """The object's bytes; None when there is none."""

    def delete(self, key: str) -> None: ...


class S3Objects:
    """The objects under one prefix of one bucket: `s3://bucket/prefix`, `?endpoint=http://host:port` for a store
    other than the one boto3 finds by itself."""

    def __init__(self, url: str) -> None:
        import boto3  # the `s3` extra: only a deployment that names an object store needs it
        from botocore.config import Config

        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"the object store URL must be s3://bucket[/prefix], not {url!r}")
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        endpoint = parse_qs(parsed.query).get("endpoint", [None])[0]
        config = Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=5, read_timeout=60)
        # A session of its own: the default one is not safe to make clients from in several threads at once.
        self._client = boto3.session.Session().client("s3", endpoint_url=endpoint, config=config)
        self._client.head_bucket(Bucket=self.bucket)  # a wrong name or credentials fail at start, not at a commit

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: bytes) -> None:
        self._client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def get(self, key: str) -> bytes | None:
        try:
            return self._client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except self._client.exceptions.NoSuchKey:
            return None

    def delete(self, key: str) -> None:
        self._client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def names(self) -> list[str]:
        """Every object's name under the prefix, sorted."""
        pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(""))
        return sorted(item["Key"][len(self._key("")):] for page in pages for item in page.get("Contents", []))


class CachedObjects:
    """An object store read through a folder of copies that holds at most `max_bytes`, the least recently read
    evicted first. Another process on the same folder may evict a copy this one counts: a missing copy is fetched
    again."""

    def __init__(self, store: ObjectStore, folder: Path, max_bytes: int) -> None:
        self.store, self.folder, self.max_bytes = store, folder, max_bytes
        folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        found = sorted((p.stat().st_mtime, p.name, p.stat().st_size) for p in folder.iterdir()
                       if not p.name.startswith("."))  # read last, evicted last; a temporary file is no copy
        self._sizes: OrderedDict[str, int] = OrderedDict((name, size) for _, name, size in found)
        self._total = sum(self._sizes.values())

    def put(self, key: str, data: bytes) -> None:
        self.store.put(key, data)
        self._keep(key, data)

    def get(self, key: str) -> bytes | None:
        try:
            data = (self.folder / key).read_bytes()
        except FileNotFoundError:
            data = self.store.get(key)
            if data is not None:
                self._keep(key, data)
            return data
        with self._lock:
            self._count(key, len(data))
        with suppress(FileNotFoundError):  # evicted by another process meanwhile
            os.utime(self.folder / key)  # a restarted process keeps the order
        return data

    def forget(self, key: str) -> None:
        """Drop the local copy only (one that did not match its hash)."""
        (self.folder / key).unlink(missing_ok=True)
        with self._lock:
            self._total -= self._sizes.pop(key, 0)

    def delete(self, key: str) -> None:
        self.store.delete(key)
        self.forget(key)

    def _keep(self, key: str, data: bytes) -> None:
        try:
            write_bytes_atomic(self.folder / key, data)
        except OSError:  # a full disk: the object store has it, this read or write goes on without a copy
            return
        with self._lock:
            self._count(key, len(data))
            while self._total > self.max_bytes and len(self._sizes) > 1:
                evicted, size = self._sizes.popitem(last=False)
                self._total -= size
                (self.folder / evicted).unlink(missing_ok=True)

    def _count(self, key: str, size: int) -> None:
        """`key` as read last, of `size` bytes (under the lock)."""
        self._total += size - self._sizes.pop(key, 0)
        self._sizes[key] = size
