"""Learning one document: a pipeline of stages (workers/stages/) from the current version.

prepare (the parent's state and scores, the candidate begun) -> weigh (the examples) -> train -> the gate's verdict
-> commit or reject. A removal (DELETE /documents/{id}) runs the same stages with `remove` in place of weigh and
train (stages/removal.py). Versions are strictly sequential: a candidate names the version it was trained from, and
the store refuses the commit if another version became current meanwhile; the candidate is then committed on the new
version where what was committed meanwhile cannot meet it (stages/rebase.py), else the job runs again from there.
Statuses move only through the store's `move` (core/lifecycle.py)."""
from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import methods  # noqa: F401  (registers every method folder)
from core import erasure
from core.documents import DocumentStore
from core.heap import map_large_blocks
from core.layout import laid_out
from core.lifecycle import Status
from core.model.loader import LoadedModel, load_model
from core.probes import to_json
from core.settings import Settings
from core.storage import document_lease, learner_lease, open_suites, open_versions, shared_engine
from core.training import UpdateMethod
from core.versions import AlreadyCommitted, ParentMoved
from workers.held import Held
from workers.run import RetryAfterRejection
from workers.stages import parent_scores, prepare
from workers.stages.commit import attempt_failed, finish, reject, withdrawn
from workers.stages.parts import Parts
from workers.stages.removal import remove, settle
from workers.stages.scoring import Scorer
from workers.stages.train import train
from workers.stages.weigh import weigh
from workers.weigher import Weigher
from workers.yielding import Rests

log = logging.getLogger(__name__)
MAX_PARENT_RETRIES = 3


class Learner:
    def __init__(self, settings: Settings, loaded: LoadedModel | None = None,
                 publish: Callable[[int], None] | None = None, busy: Callable[..., bool] | None = None) -> None:
        loaded = loaded or load_model(settings)
        self.model, self.documents = loaded.model, DocumentStore(settings.data_dir, settings.database_url)
        self.engine = shared_engine(settings)  # one pool for the stores and the leases, where no folder is shared
        self.versions, self.suites = open_versions(settings, self.engine), open_suites(settings, self.engine)
        self.held = Held(settings, loaded.model, loaded.tokenizer, loaded.name, self.versions, self.suites)
        # Rests between steps and after each phase of a job while the API of this process decodes (embedded).
        self.rests = Rests.beside(settings.embedded, busy)
        self.parts = Parts(settings, loaded.model, loaded.tokenizer, self.documents, self.versions, self.suites,
                           self.held, Scorer(loaded.model, loaded.tokenizer, self.held, self.rests),
                           Weigher(settings, loaded.model, loaded.tokenizer, loaded.name, self.held.method),
                           self.rests, publish or (lambda version: None))
        self.turns = learner_lease(settings, self.engine)  # warming up takes turns; jobs too unless in parallel
        self.lease = nullcontext() if settings.training.parallel else self.turns
        map_large_blocks()  # a long document's steps would otherwise leave their transients in RSS

    @property
    def methods(self) -> dict[str, UpdateMethod]:
        return self.held.methods

    def method(self, name: str) -> UpdateMethod:
        return self.held.method(name)

    def warm(self) -> None:
        """Before any document, what a first job would find missing made now (stages/prepare.py: warm). The embedded
        learner does it right after start, at idle priority (workers/job.warm_learner), so a first document under
        load starts where any later one does."""
        with self.turns:
            prepare.warm(self.parts)

    def learn(self, document_id: str) -> Status:
        """Run the job for one document; returns its final status. Learners of several workers train at once (see
        above), but one document at a time (a second job of it waits, then finds it final); with
        CKL_TRAINING_PARALLEL off, one learner at a time per store holds the lease."""
        with self.lease:
            if target := self.documents.get(document_id).get("removes"):  # its commit first, under its own lease
                with document_lease(self.engine, self.parts.settings, target):
                    settle(self.parts, target)
            with document_lease(self.engine, self.parts.settings, document_id):
                return self._claimed(document_id)

    def _claimed(self, document_id: str) -> Status:
        if (record := self.documents.claim(document_id)) is None:  # final: learned, refused or withdrawn
            return Status(self.documents.get(document_id)["status"])
        # Withdrawn while an earlier attempt trained; one a version holds is committed (its queued removal follows).
        if record.get("withdrawing") and self.versions.holding(document_id, self.versions.current()) is None:
            return withdrawn(self.parts, document_id)
        try:
            return self._from_current({**record, "text": laid_out(record["text"] or "")})
        except Exception as exc:
            self.held.forget_loaded()  # the methods may hold a half-trained candidate
            attempt_failed(self.parts, document_id, record["attempts"], exc)
            raise

    def _from_current(self, record: dict[str, Any]) -> Status:
        """Learn (or remove) from the current version, again from the new one when the parent moved meanwhile."""
        document_id = record["document_id"]
        for _ in range(MAX_PARENT_RETRIES):
            try:
                parent = self.versions.current()
                if (held := self.versions.holding(document_id, parent)) is not None:
                    raise AlreadyCommitted(document_id, held)
                if record.get("removes"):
                    return remove(self.parts, parent, record)
                return self._learn(parent, record)
            except ParentMoved as moved:
                log.warning("document %s: %s; training again", document_id, moved)
                self.documents.move(document_id, Status.TRAINING)
            except AlreadyCommitted as done:  # a retried job whose commit happened: only the record missed it
                self.held.forget_loaded()
                if record.get("removes"):
                    erasure.erase(self.documents, self.versions, record["removes"], done.version)
                self.documents.move(document_id, Status.COMMITTED, version=done.version)
                return Status.COMMITTED
        raise RuntimeError(f"the current version kept moving during {MAX_PARENT_RETRIES} attempts")

    def _learn(self, parent: int, record: dict[str, Any]) -> Status:
        """The document's stages; once more after a first rejection whose reason suggests another try."""
        own = prepare.own_probes(self.parts, record)
        try:
            return self._stages(parent, record, own)
        except RetryAfterRejection as retry:
            log.warning("document %s: rejected (%s); trying again: %s", record["document_id"],
                        retry.first_gate["reason"], retry.plan.why)
            self.documents.move(record["document_id"], Status.TRAINING)
            return self._stages(parent, record, own, retry)

    def _stages(self, parent: int, record: dict[str, Any], sent: list, retry: RetryAfterRejection | None = None
                ) -> Status:
        parts, after_phase = self.parts, self.rests.after_phase
        run = prepare.prepare(parts, parent, record, record["method"], own=sent)
        after_phase(run.timings, "score_before_s")
        own = run.suites["own"]  # the probes sent or made, and the prompts of the facts they replace asked anew
        if reason := prepare.begin(parts, run, own):
            return reject(parts, run, reason)
        parent_scores.add_neighbours(parts, run, own)
        after_phase(run.timings, "neighbours_s")
        parent_scores.score_deferred(parts, run)
        after_phase(run.timings, "score_moved_s")
        examples, pinned, replay = weigh(parts, run)
        after_phase(run.timings, "weigh_s")
        train(parts, run, examples, own, replay, pinned, plan=retry.plan if retry else None)
        if retry:
            run.fields["retried"] = retry.on_record()
        return finish(parts, run, probes=to_json(own), may_retry=retry is None)
