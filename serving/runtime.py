"""What the API process holds while it runs: the served model, the stores, the queue, the watcher."""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from core import erasure, recovery, registry
from core.documents import DocumentStore
from core.model.loader import LoadedModel, load_model, sharing_weights
from core.model.served_model import ServingModel, install_committed
from core.probes import GENERAL_TOKENS, ProbeSuites
from core.queue import VERSION_CHANNEL, InProcessQueue, JobFunction, JobQueue, RQQueue, job_id_for
from core.scoring import greedy_continuations, score_probes
from core.settings import Settings
from core.storage import open_suites, open_versions, shared_engine
from core.versions import UnknownVersion, VersionStore
from serving import forgetting

log = logging.getLogger(__name__)
# A queued record without a job older than this was left by a crash between its write and its enqueue (a live
# request takes milliseconds between the two): the API queues its job.
UNQUEUED_AFTER_S = 30.0
# (served model, text, method, told each window's seconds on the decoder)
Preview = Callable[[ServingModel, str, str, Callable[[float], None]], "list[tuple[str, str]] | None"]


@dataclass
class Runtime:
    settings: Settings
    documents: DocumentStore
    versions: VersionStore
    suites: ProbeSuites
    run_job: JobFunction | None = None  # the learning job both queues run
    warm: Callable[[], object] | None = None  # the embedded learner's preparation, before its first job
    load: Callable[[], LoadedModel] | None = None  # how the served model loads; None: load_model(settings)
    # The auto-probes the learner would make for (served model, text, method); None where it would make none
    # (workers/preview.py; POST /documents/preview).
    preview: Preview | None = None
    queue: JobQueue | None = None
    serving: ServingModel | None = None
    error: str | None = None
    fallback: dict | None = None  # set when the current version did not verify at start
    swaps: deque[float] = field(default_factory=lambda: deque(maxlen=1000))  # seconds each swap paused decoding
    # Whether the API decodes, or did `within_s` ago (the generation service sets it): the embedded learner yields.
    decoding: Callable[..., bool] = lambda within_s=0.0: False
    # The embedded learner's model: the served model's weights under modules of its own (None under RQ, where a
    # worker process loads its own, and for a 4-bit model).
    learner_model: LoadedModel | None = None
    _wake: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def create(cls, settings: Settings, run_job: JobFunction | None = None,
               load: Callable[[], LoadedModel] | None = None, preview: Preview | None = None,
               warm: Callable[[], object] | None = None) -> Runtime:
        engine = shared_engine(settings)
        return cls(settings, DocumentStore(settings.data_dir, settings.database_url), open_versions(settings, engine),
                   open_suites(settings, engine), run_job, warm, load, preview)

    def start(self) -> None:
        """Load the model and start the queue and the version watcher (runs in a background thread)."""
        try:
            s = self.settings
            if s.method not in registry.servable():
                raise ValueError(f"CKL_METHOD={s.method!r} is not a registered method ({', '.join(registry.servable())})")
            loaded = self.load() if self.load else load_model(s, progress=lambda msg: log.warning(msg))
            if not s.redis_url and not s.load_in_4bit:
                self.learner_model = sharing_weights(loaded)  # before serving attaches anything to `loaded`
            serving = ServingModel(loaded, s)
            # Version 0's suites, made before serving: a first document making them would stall decoding for seconds.
            self.suites.ensure_nf_suite(
                s.model, lambda probes: serving.run(0, lambda m: score_probes(m, serving.tokenizer, probes)))
            self.suites.ensure_general(s.model, lambda prompts: serving.run(
                0, lambda m: greedy_continuations(m, serving.tokenizer, prompts, GENERAL_TOKENS)))
            if orphans := self.versions.reconcile():
                log.warning("version folders never made current (a crash during a commit), flagged: %s", orphans)
            self._install_newest_good(serving)
            try:
                forgetting.fold_lineage(self.versions)
            except Exception:  # a manifest it cannot read: a request that reads it reports that, not the start
                log.exception("could not fold the current version's lineage")
            run_job = self.run_job
            assert run_job is not None, "the runtime needs the learning job (workers.job.learn_document)"
            if s.redis_url:
                rq = RQQueue(run_job, s.redis_url, s.queue_name, s.job_timeout_s, s.job_retries)
                self.queue = rq
                threading.Thread(target=self._listen_redis, args=(rq,), daemon=True).start()
                threading.Thread(target=self._queue_orphans, args=(rq,), daemon=True, name="ckl-orphans").start()
            else:
                self.queue = InProcessQueue(lambda doc_id: (run_job(doc_id), self._wake.set()), s.job_retries,
                                            first=self.warm)
                held = self.versions.current()
                for record in recovery.resumable(  # the worker died with the last server
                        self.documents, s.job_retries, lambda doc: self.versions.holding(doc, held),
                        partial(erasure.erase, self.documents, self.versions)):
                    self.queue.enqueue(record, record["attempts"])
            for document_id in erasure.finish_owed(self.documents, self.versions):  # a crash cut them short
                log.warning("finished the erasure of document %s", document_id)
            threading.Thread(target=self._watch, daemon=True, name="ckl-version-watcher").start()
            self.serving = serving
        except Exception as exc:  # shown by /ready instead of a silent dead server
            log.exception("start-up failed")
            self.error = f"{type(exc).__name__}: {exc}"

    def _install_newest_good(self, serving: ServingModel) -> None:
        """The current version; if its files do not verify (a truncated delta after a power cut), the newest
        version of its lineage that does, made current and reported on /ready. If the pointer or the lineage
        cannot be read at all (an empty CURRENT, a lost manifest), the newest committed version that loads."""
        try:
            current: int | None = self.versions.current()
            order = [m["version"] for m in reversed(self.versions.lineage(current))] + [0]
        except (ValueError, OSError, UnknownVersion) as exc:
            log.exception("the current version cannot be read")
            current, order = None, list(reversed(self.versions.versions()))
            self.fallback = {"from": None, "reason": f"{type(exc).__name__}: {exc}"}
        for version in order:
            try:
                self._install(version, serving)
            except (ValueError, OSError, UnknownVersion) as exc:  # its files do not verify; anything else is raised
                log.exception("version %d does not verify", version)
                self.fallback = self.fallback or {"from": current, "reason": f"{type(exc).__name__}: {exc}"}
                continue
            if version != current:
                self.versions.activate(version, why="fallback")
                self.fallback["to"] = version
                log.warning("version %s did not verify: serving version %d", current, version)
            return

    def _install(self, version: int, serving: ServingModel) -> None:
        paused_s = install_committed(serving, self.versions, version)
        self.swaps.append(paused_s)
        log.warning("serving knowledge version %d (decoding paused %.1f ms)", version, 1000 * paused_s)

    def _watch(self) -> None:
        """Swap in the current version whenever it changes: woken by an event, or by polling."""
        while not self._stop.is_set():
            self._wake.wait(self.settings.version_poll_s)
            self._wake.clear()
            version = self.versions.current()
            if self.serving is not None and version != self.serving.current:
                try:
                    self._install(version, self.serving)
                except Exception:
                    log.exception("could not swap in version %d", version)

    def _listen_redis(self, rq: RQQueue) -> None:
        while not self._stop.is_set():
            try:
                pubsub = rq.redis.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(VERSION_CHANNEL)
                while not self._stop.is_set():
                    if pubsub.get_message(timeout=1.0):
                        self._wake.set()
            except Exception:  # Redis went away: the watcher's polling still picks versions up
                self._stop.wait(self.settings.version_poll_s)

    def _queue_orphans(self, rq: RQQueue) -> None:
        """Queue the job of every record a crash left queued without one, now and every UNQUEUED_AFTER_S (the
        worker's start re-queues what it finds unfinished; this covers the API's own crash)."""
        while not self._stop.is_set():
            try:
                waiting: set[str] | None = None  # the lanes' job ids, read once a round when a record needs them
                for record in recovery.unqueued(self.documents, time.time() - UNQUEUED_AFTER_S):
                    queued = job_id_for(record["document_id"], record["attempts"])
                    waiting = rq.job_ids() if waiting is None else waiting
                    if queued not in waiting:  # else: queued, and the crash came before its id was written
                        log.warning("queueing document %s: its job was never queued", record["document_id"])
                        rq.enqueue(record, record["attempts"])
                    self.documents.update(record["document_id"], job_id=queued)
            except Exception:  # Redis away or a record being erased: the next round tries again
                log.exception("could not queue the jobs of unqueued documents")
            self._stop.wait(UNQUEUED_AFTER_S)

    def notify(self) -> None:
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self.queue is not None:
            self.queue.close()
