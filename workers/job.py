"""Entry points that run the learning job: the RQ job function, the RQ worker, and the embedded runner."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from service.documents import FINAL, DocumentStore
from service.queue import VERSION_CHANNEL, RQQueue
from service.settings import Settings
from workers.learner import Learner

log = logging.getLogger(__name__)

_learner: Learner | None = None
_lock = threading.Lock()


def _get_learner(settings: Settings, publish: Callable[[int], None] | None = None) -> Learner:
    """The process's learner: the model is loaded once and kept for every job."""
    global _learner
    with _lock:
        if _learner is None:
            _learner = Learner(settings, publish=publish)
        return _learner


def learn_document(document_id: str) -> str:
    """The RQ job function (the worker set the learner up; a bare process builds it from CKL_* settings)."""
    return _get_learner(Settings()).learn(document_id)


def embedded_runner(settings: Settings) -> Callable[[str], None]:
    """The job function for the in-process queue (the model loads on the first document), with retries."""
    def run(document_id: str) -> None:
        error = ""
        for _ in range(settings.job_retries + 1):
            try:
                _get_learner(settings).learn(document_id)
                return
            except Exception as exc:
                log.exception("document %s: attempt failed", document_id)
                error = f"{type(exc).__name__}: {exc}"
        documents = DocumentStore(settings.data_dir)
        if documents.get(document_id)["status"] not in FINAL:  # e.g. the model itself failed to load
            documents.update(document_id, status="failed", error=error)
    return run


def requeue_interrupted(settings: Settings, queue: RQQueue) -> list[str]:
    """Queue again every document a dead worker left unfinished (jobs are idempotent: a finished one is skipped)."""
    documents = DocumentStore(settings.data_dir)
    requeued = []
    for record in documents.pending():
        attempt = record["attempts"]
        if record["status"] == "queued" and record["job_id"] and queue.has_job(record["job_id"]):
            continue
        if attempt > settings.job_retries:  # the worker died on it every time: stop trying
            documents.update(record["document_id"], status="failed",
                             error=f"the worker stopped during all {attempt} attempts")
            continue
        job_id = queue.enqueue(record["document_id"], attempt + 1)
        documents.update(record["document_id"], status="queued", job_id=job_id)
        requeued.append(record["document_id"])
    return requeued


def run_worker(settings: Settings, burst: bool = False) -> None:
    """`ckl worker`: load the model once, re-queue unfinished documents, then run jobs in this process.

    RQ's default Worker forks a child per job, which would load the model again for every document;
    SimpleWorker runs jobs in the worker process itself, so the model stays loaded.
    """
    from rq import SimpleWorker

    assert settings.redis_url, "ckl worker needs CKL_REDIS_URL"
    queue = RQQueue(settings.redis_url, settings.queue_name, settings.job_timeout_s, settings.job_retries)
    _get_learner(settings, publish=lambda version: queue.redis.publish(VERSION_CHANNEL, str(version)))
    for document_id in requeue_interrupted(settings, queue):
        log.warning("re-queued unfinished document %s", document_id)
    SimpleWorker([queue.rq_queue], connection=queue.redis).work(burst=burst)
