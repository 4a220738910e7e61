"""The job queue: one small interface, two implementations, both given the job function (workers/job.py)
by whoever builds them; this package never imports workers.

- `RQQueue`: jobs go to Redis, naming the job function; a separate `ckl worker` process runs them.
- `InProcessQueue`: the embedded default; the same job function runs in a thread of the API process.

Both take turns between tenants: one tenant's hundred documents do not delay another's first. A document waits in its
tenant's lane (`lane_of`); the embedded queue takes one from each lane in turn, and RQ workers take from the lanes'
queues in turn (RQ's round-robin dequeue strategy). RQ has `LANES` queues: the first for a server without keys,
a tenant's or key's among the others by a hash of its name (two may share one).
"""
from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

VERSION_CHANNEL = "ckl:versions"
LANES = 8


class JobQueue(Protocol):
    def enqueue(self, record: dict[str, Any], attempt: int) -> str: ...

    def close(self) -> None: ...


def job_id_for(document_id: str, attempt: int) -> str:
    return f"doc-{document_id}-{attempt}"


JobFunction = Callable[[str], object]  # a document id in; raises when the attempt failed


def lane_of(record: dict[str, Any]) -> str:
    """Whose turn a document waits for: its tenant's (namespace), or in the shared namespace its key's owner."""
    return record.get("namespace") or record.get("owner") or ""


def lane_number(lane: str) -> int:
    """A lane's RQ queue, the same in every process: the first for a server without keys (one lane, the queue
    named as configured), one of the others for a tenant or a key."""
    return 1 + int.from_bytes(hashlib.sha256(lane.encode()).digest()[:4], "big") % (LANES - 1) if lane else 0


class InProcessQueue:
    """Runs `run(document_id)` for each queued id, one at a time, in a daemon thread, taking each lane's first in
    turn; a failed run is run again right away, up to `retries` times (as RQQueue's Retry does). `first` runs in
    that thread before any job (the learner's preparation)."""

    def __init__(self, run: JobFunction, retries: int = 0, first: Callable[[], object] | None = None) -> None:
        self._run = run
        self._retries = retries
        self._first = first
        self._lanes: OrderedDict[str, deque[str]] = OrderedDict()  # the lane whose turn it is first
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="ckl-embedded-worker", daemon=True)
        self._thread.start()

    def enqueue(self, record: dict[str, Any], attempt: int) -> str:
        with self._changed:
            self._lanes.setdefault(lane_of(record), deque()).append(record["document_id"])
            self._changed.notify()
        return job_id_for(record["document_id"], attempt)

    def _next(self) -> str | None:
        """The first document of the lane whose turn it is (that lane then goes last); None once closed and empty."""
        with self._changed:
            while not self._lanes and not self._closed:
                self._changed.wait()
            if not self._lanes:
                return None
            lane, waiting = self._lanes.popitem(last=False)
            document_id = waiting.popleft()
            if waiting:
                self._lanes[lane] = waiting
            return document_id

    def _loop(self) -> None:
        if self._first is not None:
            self._first()
        while (document_id := self._next()) is not None:
            for _ in range(self._retries + 1):
                try:
                    self._run(document_id)
                    break
                except Exception:  # the job records its own failure; the loop must survive it
                    log.exception("embedded job for document %s failed", document_id)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()


def dotted_name(fn: Callable) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def only_jobs(*allowed: str) -> type:
    """An RQ job class that runs only the named functions and no callbacks: whoever can write to Redis cannot make
    the worker import and call anything else (the JSON serializer already keeps pickle out)."""
    from rq.job import Job as RQJob

    def no_callback(name_attribute: str) -> property:
        def get(job: RQJob) -> None:
            if getattr(job, name_attribute, None):
                raise PermissionError("refused a job callback: this worker runs none")
        return property(get)

    class ProjectJob(RQJob):
        success_callback = no_callback("_success_callback_name")
        failure_callback = no_callback("_failure_callback_name")
        stopped_callback = no_callback("_stopped_callback_name")

        @property
        def func(self):
            if self.instance is not None or self.func_name not in allowed:
                raise PermissionError(f"refused job function {self.func_name!r}: this worker runs only {allowed}")
            return super().func

    return ProjectJob


class RQQueue:
    """Jobs in Redis as JSON: `job` must be a module-level function, which RQ records by its dotted name and a
    worker process imports (only that one: `job_class`). The lanes' queues are `name` (the first) and `name:1` to
    `name:7`."""

    def __init__(self, job: JobFunction, redis_url: str, name: str, timeout_s: int, retries: int) -> None:
        from redis import Redis
        from rq import Queue
        from rq.serializers import JSONSerializer

        self._job = job
        self.redis = Redis.from_url(redis_url)
        self.job_class = only_jobs(dotted_name(job))
        self.rq_queues = [Queue(name if n == 0 else f"{name}:{n}", connection=self.redis, serializer=JSONSerializer,
                                job_class=self.job_class) for n in range(LANES)]
        self._timeout_s = timeout_s
        self._retries = retries

    def enqueue(self, record: dict[str, Any], attempt: int) -> str:
        from rq import Retry

        job = self.rq_queues[lane_number(lane_of(record))].enqueue_call(
            self._job,
            args=(record["document_id"],),
            job_id=job_id_for(record["document_id"], attempt),
            timeout=self._timeout_s,
            retry=Retry(max=self._retries) if self._retries else None,  # immediate: no scheduler process needed
            result_ttl=86400,
            failure_ttl=7 * 86400,
        )
        return job.id

    def job_ids(self) -> set[str]:
        """The ids of every job waiting in the lanes, each lane read once: a loop over many documents asks this
        once, not each lane per document."""
        return {job_id for queue in self.rq_queues for job_id in queue.get_job_ids()}

    def close(self) -> None:
        self.redis.close()


def without_password(url: str) -> str:
    """A Redis URL as it may be printed (a start-up line lands in container logs): its password as ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***" if parts.username else ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")))
