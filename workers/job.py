"""The learning job and what runs it: `learn_document`, the one job function both queues are given (RQ's
worker and the embedded queue's thread call it), and `ckl worker`."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial

from core import erasure, logs, recovery
from core.documents import DocumentStore
from core.lifecycle import FINAL, Status, after_failed_attempt
from core.model.loader import LoadedModel
from core.queue import VERSION_CHANNEL, RQQueue
from core.settings import Settings
from core.storage import open_versions
from workers.learner import Learner
from workers.threads import idle_priority_here, threads_here

log = logging.getLogger(__name__)

_settings: Settings | None = None
_publish: Callable[[int], None] | None = None
_busy: Callable[..., bool] | None = None
_loaded: Callable[[], LoadedModel | None] | None = None
_learner: Learner | None = None
_lock = threading.Lock()


def configure(settings: Settings, publish: Callable[[int], None] | None = None,
              busy: Callable[..., bool] | None = None, loaded: Callable[[], LoadedModel | None] | None = None) -> None:
    """The settings (the command line's, flags included), version announcer and, in the API's process, whether
    it is decoding (the learner yields to it) and the model to learn on (the served weights, shared) that this
    process's learner is built with; a process that never calls this (a bare `rq worker`) builds it from CKL_*
    settings and loads its own model."""
    global _settings, _publish, _busy, _loaded
    with _lock:
        _settings, _publish, _busy, _loaded = settings, publish, busy, loaded


def process_learner() -> Learner:
    """The process's learner: the model is loaded once, on first use, and kept for every job."""
    global _learner
    with _lock:
        if _learner is None:
            _learner = Learner(_settings or Settings(), loaded=_loaded() if _loaded else None, publish=_publish,
                               busy=_busy)
        return _learner


def _beside_the_decoder(settings: Settings) -> None:
    """Where the API of this process decodes on the same cores, the calling thread computes on fewer threads and at
    idle priority (workers/threads.py); set before the learner computes."""
    if _busy is not None:
        if settings.embedded.learner_threads:
            threads_here(settings.embedded.learner_threads)
        if settings.embedded.learner_idle_priority:
            idle_priority_here()


def warm_learner() -> None:
    """The embedded queue's first work, before any job: the process's learner built and warmed (Learner.warm)."""
    _beside_the_decoder(_settings or Settings())
    try:
        process_learner().warm()
    except Exception:  # the first job does it then, or records why it cannot
        log.exception("the learner could not prepare before its first job")


def learn_document(document_id: str) -> str:
    """The job function: learn one document; returns its final status, raises when the attempt failed
    (the queue runs it again up to CKL_JOB_RETRIES times)."""
    settings = _settings or Settings()
    _beside_the_decoder(settings)
    try:
        learner = process_learner()
    except Exception as exc:  # e.g. the model did not load: count the attempt, or the document waits forever
        record_failed_attempt(settings, document_id, f"{type(exc).__name__}: {exc}")
        raise
    return learner.learn(document_id)


def record_failed_attempt(settings: Settings, document_id: str, error: str) -> None:
    """An attempt that never reached the learner, counted as Learner.learn counts its own. A document already
    final (another job for it finished) keeps its status: a final status has no moves out."""
    documents = DocumentStore(settings.data_dir, settings.database_url)
    record = documents.get(document_id)
    if record["status"] in FINAL:
        return
    attempts = record["attempts"] + 1
    documents.move(document_id, after_failed_attempt(attempts, settings.job_retries), attempts=attempts, error=error)


def requeue_interrupted(settings: Settings, queue: RQQueue) -> list[str]:
    """Queue again every document a dead worker left unfinished (jobs are idempotent: a finished one is skipped), and
    finish the erasures a crash cut short."""
    documents = DocumentStore(settings.data_dir, settings.database_url)
    versions = open_versions(settings)
    requeued = []
    erase = partial(erasure.erase, documents, versions)
    waiting = queue.job_ids()
    for record in recovery.resumable(documents, settings.job_retries,
                                     lambda doc: versions.holding(doc, versions.current()), erase):
        if record["status"] == Status.QUEUED and record["job_id"] in waiting:
            continue
        job_id = queue.enqueue(record, record["attempts"] + 1)
        documents.move(record["document_id"], Status.QUEUED, job_id=job_id)
        requeued.append(record["document_id"])
    for document_id in erasure.finish_owed(documents, versions):  # a crash cut them short
        log.warning("finished the erasure of document %s", document_id)
    return requeued


def run_worker(settings: Settings, burst: bool = False) -> None:
    """`ckl worker`: load the model once, re-queue unfinished documents, then run jobs in this process.

    RQ's default Worker forks a child per job, which would load the model again for every document;
    SimpleWorker runs jobs in the worker process itself, so the model stays loaded.
    """
    logs.configure(settings.log_format)
    from rq import SimpleWorker
    from rq.serializers import JSONSerializer
    from rq.worker import DequeueStrategy

    assert settings.redis_url, "ckl worker needs CKL_REDIS_URL"
    queue = RQQueue(learn_document, settings.redis_url, settings.queue_name, settings.job_timeout_s,
                    settings.job_retries)
    configure(settings, publish=lambda version: queue.redis.publish(VERSION_CHANNEL, str(version)))
    process_learner()
    for document_id in requeue_interrupted(settings, queue):
        log.warning("re-queued unfinished document %s", document_id)
    # Each lane's queue in turn: one tenant's backlog does not hold back another's documents (core/queue.py).
    SimpleWorker(queue.rq_queues, connection=queue.redis, serializer=JSONSerializer,
                 job_class=queue.job_class).work(burst=burst, dequeue_strategy=DequeueStrategy.ROUND_ROBIN)
