"""The job queue: one small interface, two implementations, both given the job function (workers/job.py)
by whoever builds them; this package never imports workers.

- `RQQueue`: jobs go to Redis, naming the job function; a separate `ckl worker` process runs them.
- `InProcessQueue`: the embedded default; the same job function runs in a thread of the API process.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

VERSION_CHANNEL = "ckl:versions"


class JobQueue(Protocol):
    def enqueue(self, document_id: str, attempt: int) -> str: ...

    def close(self) -> None: ...


def job_id_for(document_id: str, attempt: int) -> str:
    return f"doc-{document_id}-{attempt}"


JobFunction = Callable[[str], object]  # a document id in; raises when the attempt failed


class InProcessQueue:
    """Runs `run(document_id)` for each queued id, one at a time, in a daemon thread; a failed run is
    run again right away, up to `retries` times (as RQQueue's Retry does). `first` runs in that thread before any
    job (the learner's preparation)."""

    def __init__(self, run: JobFunction, retries: int = 0, first: Callable[[], object] | None = None) -> None:
        self._run = run
        self._retries = retries
        self._first = first
        self._items: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="ckl-embedded-worker", daemon=True)
        self._thread.start()

    def enqueue(self, document_id: str, attempt: int) -> str:
        self._items.put(document_id)
        return job_id_for(document_id, attempt)

    def _loop(self) -> None:
        if self._first is not None:
            self._first()
        while (document_id := self._items.get()) is not None:
            for _ in range(self._retries + 1):
                try:
                    self._run(document_id)
                    break
                except Exception:  # the job records its own failure; the loop must survive it
                    log.exception("embedded job for document %s failed", document_id)

    def close(self) -> None:
        self._items.put(None)


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
    worker process imports (only that one: `job_class`)."""

    def __init__(self, job: JobFunction, redis_url: str, name: str, timeout_s: int, retries: int) -> None:
        from redis import Redis
        from rq import Queue
        from rq.serializers import JSONSerializer

        self._job = job
        self.redis = Redis.from_url(redis_url)
        self.job_class = only_jobs(dotted_name(job))
        self.rq_queue = Queue(name, connection=self.redis, serializer=JSONSerializer, job_class=self.job_class)
        self._timeout_s = timeout_s
        self._retries = retries

    def enqueue(self, document_id: str, attempt: int) -> str:
        from rq import Retry

        job = self.rq_queue.enqueue_call(
            self._job,
            args=(document_id,),
            job_id=job_id_for(document_id, attempt),
            timeout=self._timeout_s,
            retry=Retry(max=self._retries) if self._retries else None,  # immediate: no scheduler process needed
            result_ttl=86400,
            failure_ttl=7 * 86400,
        )
        return job.id

    def has_job(self, job_id: str) -> bool:
        return job_id in self.rq_queue.get_job_ids()

    def close(self) -> None:
        self.redis.close()


def without_password(url: str) -> str:
    """A Redis URL as it may be printed (a start-up line lands in container logs): its password as ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***" if parts.username else ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")))
