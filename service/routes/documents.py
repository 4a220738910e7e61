"""/documents (teach scope): post a document to learn, remove one's contribution, read one's own documents.
A key sees only the documents it taught (admin sees all); another key's document is as unknown as none."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from core import erasure, registry, routing
from core.documents import IdempotencyConflict, UnknownDocument
from core.keys import Caller
from core.layout import laid_out
from core.lifecycle import PENDING, Status
from core.namespaces import SHARED, namespace_of
from core.state import same_prompt
from core.versions import UnknownVersion
from service.auth import needs
from service.dependencies import RuntimeDep
from service.errors import ApiError, busy, field_error
from service.generations import require_serving
from service.schemas import (
    DOCUMENT_ID,
    DOCUMENT_NAME,
    Cost,
    DocumentAccepted,
    DocumentPreview,
    DocumentRequest,
    MadeProbe,
)
from serving.forgetting import replacements
from serving.runtime import Runtime
from serving.shares import owed_wait

router = APIRouter()
TeachCaller = Annotated[Caller, Depends(needs("teach"))]  # each route's access rule: the key that asks
# phi's pass over a previewed text holds the decoder's lock one window at a time, and waits out its share of the
# decoder between two windows (share_of_decoder); it is still a pass over the whole text: one preview at a time,
# others a 429.
PREVIEWS = threading.BoundedSemaphore(1)


SQL_MAX_INT = 2**63 - 1  # the largest offset the database takes: past it, a 422 instead of its overflow (500)

@router.post("/documents", status_code=202, response_model=DocumentAccepted)
def post_document(req: DocumentRequest, runtime: RuntimeDep,
                  caller: TeachCaller) -> DocumentAccepted:
    settings = runtime.settings
    method, weighting = checked(runtime, req, caller)
    require_serving(runtime)  # refuse before storing anything while no queue exists yet
    pending = runtime.documents.pending_count()
    if pending >= settings.limits.max_queued_documents:
        raise busy(f"{pending} documents are waiting to be learned", retry_after_s=30)
    if caller.owner and runtime.documents.pending_count(caller.owner) >= settings.limits.max_queued_per_key:
        raise busy(f"this key has {settings.limits.max_queued_per_key} documents waiting", retry_after_s=30)
    body = {**req.model_dump(exclude={"idempotency_key"}), "weighting": weighting, "method": method,
            "owner": caller.owner, "namespace": caller.namespace or SHARED}
    # Idempotency keys are each API key's own: one caller can neither reuse nor probe another's.
    key = json.dumps(["user", caller.owner, req.idempotency_key]) if req.idempotency_key else None
    return accept(runtime, body, key, lambda exc: ApiError(409, "idempotency_conflict", str(exc)),
                  cost(runtime, req.text, pending))


@router.post("/documents/preview", response_model=DocumentPreview)
def preview_document(req: DocumentRequest, runtime: RuntimeDep, caller: TeachCaller) -> DocumentPreview:
    """What POST /documents would make of this body, with nothing stored or queued: the same 422s, and for a
    document without probes the auto-probes the learner would make (null where it makes none: no Train-Attention
    checkpoint for this model), with the cost."""
    method, _ = checked(runtime, req, caller)
    serving = require_serving(runtime)
    made = None
    if not req.probes and runtime.preview:
        if not PREVIEWS.acquire(blocking=False):
            raise busy("another preview is being made", retry_after_s=1)
        try:
            made = runtime.preview(serving, req.text, method, share_of_decoder(runtime))
        finally:
            PREVIEWS.release()
    return DocumentPreview(method=method, auto_probes=None if made is None else [MadeProbe(prompt=p, answer=a)
                                                                                for p, a in made],
                           cost=cost(runtime, req.text, runtime.documents.pending_count()))


def share_of_decoder(runtime: Runtime) -> Callable[[float], None]:
    """After a preview's window that held the decoder `took` seconds: while answers decode, wait until it has taken
    no more than CKL_LIMITS_PREFILL_SHARE of the decoder (a key's long prompts' share), or until none decode."""
    def wait(took: float) -> None:
        until = time.monotonic() + owed_wait(took, runtime.settings.limits.prefill_share)
        while runtime.decoding() and time.monotonic() < until:
            time.sleep(0.05)
    return wait


def checked(runtime: Runtime, req: DocumentRequest, caller: Caller) -> tuple[str, str]:
    """The method and weighting a document is taught with, after what POST refuses with a 422."""
    settings = runtime.settings
    if len(req.text) > settings.limits.max_document_chars:
        raise field_error("text", "max_chars", f"longer than {settings.limits.max_document_chars} characters")
    if len(req.probes) > settings.limits.max_probes_per_document:
        raise field_error("probes", "max_items", f"at most {settings.limits.max_probes_per_document} probes")
    weighting = req.weighting or settings.training.weighting
    if weighting == "oracle" and not any(p.answer.strip() in req.text for p in req.probes):
        raise field_error("weighting", "needs_answers_in_text",
                          "oracle weighting needs probes whose answer occurs in the text")
    method = req.method or settings.method
    refuse_at_post(runtime, req, method, caller)
    return method, weighting


def cost(runtime: Runtime, text: str, pending: int) -> Cost:
    """What learning `text` will cost (service/schemas.py: Cost): its tokens as the learner reads them, its layout
    folded (a run of blanks costs what one space does, and is as quick to count)."""
    trainings = 2 if runtime.settings.gate.retry_on_rejection else 1
    return Cost(tokens=len(require_serving(runtime).tokenizer(laid_out(text))["input_ids"]), documents_ahead=pending,
                train_s_at_most=trainings * runtime.settings.training.max_train_s)


@router.delete("/documents/{document_id}", status_code=202, response_model=DocumentAccepted)
def delete_document(document_id: str, runtime: RuntimeDep,
                    caller: TeachCaller) -> DocumentAccepted:
    """Take one document's contribution out (a removable method): a removal job makes a new, gated version. A
    document no version holds (rejected or failed, or queued and not started yet: withdrawn) is erased at once
    (200), and a failed one a version holds is removed (202); one a worker is training or gating is withdrawn by
    that worker before its gate or its commit (202, `withdrawing`); one being committed (the gate accepted it, its
    version is being written), or whose worker died in its commit, is marked withdrawn and its removal queued at
    once (202), which first waits out or ends that commit (workers/stages/removal.py: settle)."""
    target = owned(runtime, document_id, caller)
    current = runtime.versions.current()
    if target["status"] == Status.QUEUED and not target.get("removes") and \
            runtime.versions.holding(document_id, current) is None:
        target = runtime.documents.withdraw(document_id) or runtime.documents.get(document_id)  # or claimed since
    if target["status"] in (Status.TRAINING, Status.EVALUATING) and not target.get("removes") and \
            runtime.versions.holding(document_id, current) is None:  # else: committed, record behind
        if asked := runtime.documents.ask_to_withdraw(document_id):
            return JSONResponse({"document_id": document_id, "job_id": asked.get("job_id"), "status": asked["status"],
                                 "status_url": f"/documents/{document_id}", "withdrawing": True}, 202)
        target = runtime.documents.get(document_id)  # committing or final since
    if target["status"] in PENDING and not target.get("removes"):
        # Committing, or a version holds it and its record is behind: the removal ends its commit first.
        if registry.get(target["method"]).removable and runtime.documents.ask_to_remove(document_id):
            try:
                return queue_removal(runtime, caller, target)
            except ApiError as exc:  # not queued: the DELETE did not happen, so neither does the mark
                if exc.status == 503:
                    runtime.documents.take_back_removal(document_id)
                raise
        target = runtime.documents.get(document_id)  # final since, or a method whose documents stay
        if target["status"] in PENDING:
            raise ApiError(409, "being_learned", f"a worker is learning this document now ({target['status']}): "
                                                 "DELETE it again once it is final", headers={"Retry-After": "10"})
    if target["status"] in (Status.REJECTED, Status.FAILED) and not target.get("removes"):
        if target["status"] == Status.FAILED and not target.get("erased") and \
                (held := runtime.versions.holding(document_id, current)):
            # Served though its attempt failed (marked so before the learner committed such a record): removed as
            # a committed one is, since its erasure is owed either way.
            if registry.get(target["method"]).removable:
                return queue_removal(runtime, caller, target)
            raise ApiError(409, "held_by_version", f"version {held} holds this document though its attempt failed, "
                                                   "and its method cannot remove one document: roll back to a "
                                                   "version before it")
        # Erased already: a repeated DELETE writes and scans nothing again, unless a crash cut the erasure short.
        if not target.get("erased") or runtime.documents.erasures_owed(document_id):
            erasure.erase(runtime.documents, runtime.versions, document_id, None)
        return JSONResponse({"document_id": document_id, "status": target["status"], "erased": True,
                             "withdrawn": bool(target.get("withdrawn"))})
    refuse_removal(runtime, target)
    return queue_removal(runtime, caller, target)


def queue_removal(runtime: Runtime, caller: Caller, target: dict[str, Any]) -> DocumentAccepted:
    """The removal job of `target`, queued (one per target and current version: a repeated DELETE answers it)."""
    require_serving(runtime)
    document_id = target["document_id"]
    body = {"text": "", "probes": [], "method": target["method"], "weighting": "uniform", "removes": document_id,
            "owner": caller.owner, "namespace": namespace_of(target)}
    return accept(runtime, body, json.dumps(["remove", caller.owner, document_id, runtime.versions.current()]),
                  lambda exc: ApiError(409, "already_removing", "a removal of this document is already queued"))


@router.get("/documents/{document_id}")
def get_document(document_id: str, runtime: RuntimeDep, caller: TeachCaller) -> dict[str, Any]:
    """The record, which of its facts later documents replaced in the current version (from the lineage), and the
    routing key its version holds (a routed document's, until it is removed)."""
    record = owned(runtime, document_id, caller)
    replaced = [r for r in replacements(runtime.versions, runtime.versions.current()) if r["document_id"] == document_id]
    key = None
    if record["status"] == Status.COMMITTED and record.get("version") and not record.get("removes"):
        with suppress(UnknownVersion):
            key = runtime.versions.manifest(record["version"]).get("key")
    return {**record, "replaced": replaced, "routing_key": key}


@router.get("/documents")
def list_documents(runtime: RuntimeDep, caller: TeachCaller, offset: int = Query(0, ge=0, le=SQL_MAX_INT),
                   limit: int = Query(50, ge=1, le=500)) -> dict[str, Any]:
    total, records = runtime.documents.page(None if caller.is_admin else caller.owner, offset, limit)
    brief = [{k: r[k] for k in ("document_id", "status", "version", "created_at", "method")} for r in records]
    return {"total": total, "offset": offset, "limit": limit, "items": brief}


def refuse_at_post(runtime: Runtime, req: DocumentRequest, method: str, caller: Caller) -> None:
    """422 for what the worker would refuse anyway: a tenant's document for a method that cannot keep it to its
    namespace, a document of a per-document method that no prompt could be routed to (core/routing/), a probe
    that contradicts a must-keep probe (the gate keeps those), and a
    document id in `supersedes` the caller cannot see."""
    spec = registry.get(method)
    if caller.namespace and not spec.per_document:
        per_document = ", ".join(s.name for s in registry.registered() if s.per_document and s.servable)
        raise field_error("method", "not_in_namespace",
                          f"a key of namespace {caller.namespace!r} teaches with a per-document method "
                          f"({per_document}): {method}'s knowledge would answer every namespace's prompts")
    probes = [(p.prompt, p.answer) for p in req.probes]
    if spec.per_document and (reason := routing.refusal(req.text, probes, runtime.settings.routing_threshold)):
        raise field_error("text", f"not_learnable_by_{method}", reason)
    for i, probe in enumerate(req.probes):
        for kept in runtime.suites.must_keep():
            if same_prompt(probe.prompt, kept.prompt) and probe.answer.strip() != kept.answer.strip():
                shown = f"-> {kept.answer!r}" if caller.is_admin else "set by an admin"  # its answer: an admin's only
                raise field_error(f"probes.{i}.answer", "contradicts_must_keep",
                                  f"{probe.prompt!r} -> {probe.answer!r} contradicts the must-keep probe {shown} "
                                  "(DELETE /probes to let it change)")
    for named in req.supersedes:
        if DOCUMENT_NAME.fullmatch(named):
            try:
                owned(runtime, named, caller)
            except ApiError:
                raise field_error("supersedes", "unknown_document", f"no document {named}") from None


def owned(runtime: Runtime, document_id: str, caller: Caller) -> dict[str, Any]:
    """A document the caller may see: another key's document is as unknown as one that does not exist."""
    try:
        record = runtime.documents.get(document_id) if DOCUMENT_ID.fullmatch(document_id) else None
    except UnknownDocument:
        record = None
    if record is None or not caller.owns(record):
        raise ApiError(404, "not_found", f"no document {document_id}")
    return record


def refuse_removal(runtime: Runtime, target: dict[str, Any]) -> None:
    """409 unless `target` is a committed document of a removable method, in the current version's lineage."""
    if target.get("removes"):
        raise ApiError(409, "not_removable", "this is a removal; activate an earlier version to undo it")
    if target.get("removed_in_version"):
        raise ApiError(409, "already_removed", f"removed in version {target['removed_in_version']}")
    if target["status"] != Status.COMMITTED:
        raise ApiError(409, "not_committed", f"only a committed document can be removed (status: {target['status']})")
    if target["method"] not in registry.servable() or not registry.get(target["method"]).removable:
        removable = ", ".join(s.name for s in registry.registered() if s.removable)
        raise ApiError(409, "not_removable", f"only documents of a removable method ({removable}) can be removed "
                                             f"one by one; roll back with POST /versions/{{n}}/activate")
    lineage = {m["version"] for m in runtime.versions.lineage(runtime.versions.current())}
    if target["version"] not in lineage:
        raise ApiError(409, "not_current", f"version {target['version']} is not part of the current version")


def accept(runtime: Runtime, body: dict[str, Any], idempotency_key: str | None,
           conflict: Callable[[IdempotencyConflict], ApiError], cost: Cost | None = None) -> DocumentAccepted:
    """Store the document, then queue its job; the same key again answers the same record (`conflict` makes the
    409 for a key used with another body; `cost` is said of a new document only). 503 when the queue refuses, and
    nothing is kept: neither the record nor the key, so a retry with the same key is a new request."""
    try:
        record, new = runtime.documents.create(body, idempotency_key)
    except IdempotencyConflict as exc:
        raise conflict(exc) from exc
    if new:
        try:
            job_id = runtime.queue.enqueue(record, 0)
        except Exception as exc:  # e.g. Redis is down
            runtime.documents.discard(record["document_id"], idempotency_key)
            raise ApiError(503, "queue_unavailable", f"the job queue is unavailable: {exc}") from exc
        record = runtime.documents.update(record["document_id"], job_id=job_id)
    return DocumentAccepted(document_id=record["document_id"], job_id=record["job_id"], status=record["status"],
                            status_url=f"/documents/{record['document_id']}", cost=cost if new else None)
