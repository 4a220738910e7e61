"""A document's lifecycle (core/lifecycle.py) and the store's moves through it: pure Python, no model, no torch."""
import json

import pytest

from core import erasure, recovery
from core.documents import DocumentStore
from core.lifecycle import FINAL, MOVES, PENDING, IllegalTransition, Status, after_failed_attempt, transition
from core.version_folders import FolderVersionStore
from tests.database import rows

LEGAL = [(current, new) for current, targets in MOVES.items() for new in sorted(targets)]
ILLEGAL = [(current, new) for current in Status for new in Status if new not in MOVES[current]]


def test_the_statuses_are_the_strings_records_and_the_api_carry():
    assert [s.value for s in Status] == ["queued", "training", "evaluating", "committed", "rejected", "failed"]
    assert FINAL == {"committed", "rejected", "failed"} and PENDING == {"queued", "training", "evaluating"}
    assert Status.QUEUED == "queued" and f"{Status.FAILED}" == "failed" and json.dumps(Status.COMMITTED) == '"committed"'


@pytest.mark.parametrize("current,new", LEGAL)
def test_every_legal_move_passes(current, new):
    assert transition(current, new) is new
    assert transition(current.value, new.value) is new  # as a record on disk carries them


@pytest.mark.parametrize("current,new", ILLEGAL)
def test_every_other_move_raises(current, new):
    with pytest.raises(IllegalTransition, match=f"from {current} to {new}"):
        transition(current, new)


@pytest.mark.parametrize("current,new", [
    ("committed", "training"), ("committed", "committed"), ("rejected", "committed"), ("failed", "queued"),
    ("queued", "committed"), ("queued", "evaluating"), ("evaluating", "evaluating"),
])
def test_the_moves_no_job_may_make(current, new):
    with pytest.raises(IllegalTransition):
        transition(current, new)


def test_the_moves_retries_and_crashes_need():
    assert transition("training", "queued") is Status.QUEUED  # an attempt failed, retries left
    assert transition("evaluating", "training") is Status.TRAINING  # a rejection retried, a parent that moved
    assert transition("training", "training") is Status.TRAINING  # a crashed training picked up again
    assert transition("training", "committed") is Status.COMMITTED  # the version already held it
    assert transition("queued", "rejected") is Status.REJECTED  # withdrawn: its owner's DELETE before any worker


def test_a_final_status_has_no_moves_out_and_an_unknown_one_is_refused():
    assert all(not MOVES[s] for s in FINAL) and all(MOVES[s] for s in PENDING)
    with pytest.raises(IllegalTransition, match="none: it is final"):
        transition(Status.COMMITTED, Status.TRAINING)
    with pytest.raises(IllegalTransition, match="unknown document status 'paused'"):
        transition("paused", Status.TRAINING)
    with pytest.raises(IllegalTransition, match="unknown"):
        transition(Status.QUEUED, "done")


@pytest.mark.parametrize("attempts,retries,status", [
    (1, 0, Status.FAILED),
    (1, 2, Status.QUEUED), (2, 2, Status.QUEUED), (3, 2, Status.FAILED), (4, 2, Status.FAILED),
])
def test_the_retry_rule_fails_a_document_after_one_plus_retries_attempts(attempts, retries, status):
    assert after_failed_attempt(attempts, retries) is status


def test_a_record_moves_through_the_store_and_update_does_not_write_a_status(tmp_path):
    store = DocumentStore(tmp_path)
    record, _ = store.create({"text": "a"}, None)
    doc = record["document_id"]
    assert record["status"] == "queued" and type(record["status"]) is str
    moved = store.move(doc, Status.TRAINING, attempts=1, error=None)
    assert moved["status"] == "training" and moved["attempts"] == 1 and type(moved["status"]) is str
    [(status, stored)] = rows(tmp_path, "SELECT status, record FROM documents WHERE document_id = ?", doc)
    assert status == "training" and json.loads(stored)["status"] == "training" and json.loads(stored)["attempts"] == 1
    store.move(doc, Status.EVALUATING)
    store.move(doc, Status.COMMITTED, version=3)
    assert store.get(doc)["status"] == "committed" and store.get(doc)["version"] == 3 and store.pending() == []
    with pytest.raises(IllegalTransition):
        store.move(doc, Status.TRAINING, version=None)
    assert store.get(doc)["status"] == "committed" and store.get(doc)["version"] == 3  # nothing written
    with pytest.raises(TypeError, match="move"):
        store.update(doc, status="queued")
    assert store.update(doc, removed_in_version=4)["status"] == "committed"  # other fields still update


def test_resumable_fails_a_document_the_worker_died_in_at_every_allowed_attempt(tmp_path):
    """One its owner asked to withdraw while it trained fails too, owed its erasure (the owner was answered 202),
    which the start finishes next (core/erasure.py: finish_owed)."""
    store = DocumentStore(tmp_path)
    died = [store.create({"text": t}, None)[0]["document_id"] for t in ("a", "b", "c")]
    store.move(died[0], Status.TRAINING, attempts=2)  # at the cap with 1 retry: failed
    store.move(died[1], Status.TRAINING, attempts=1)  # a retry is left: run again
    store.move(died[2], Status.TRAINING, attempts=2)
    store.ask_to_withdraw(died[2])
    erased = []
    again = recovery.resumable(store, retries=1, holding=lambda _: None, erase=lambda *args: erased.append(args))
    assert [r["document_id"] for r in again] == [died[1]]
    assert store.get(died[0])["status"] == "failed" and "all 2 attempts" in store.get(died[0])["error"]
    assert store.get(died[1])["status"] == "training"
    assert erased == [] and store.get(died[2])["status"] == "failed" and store.erasures_owed() == [(died[2], None)]
    assert erasure.finish_owed(store, FolderVersionStore(tmp_path / "versions")) == [died[2]]
    assert store.get(died[2])["withdrawn"] is True and store.get(died[2])["erased"] is True
    assert store.erasures_owed() == [] and "text" not in store.get(died[2])


@pytest.mark.parametrize("status", [Status.TRAINING, Status.EVALUATING])
def test_a_document_its_version_holds_is_committed_even_when_its_last_attempt_died(tmp_path, status):
    """Killed after the commit, before the record said so, in the last allowed attempt: it is not failed (a failed
    document could not be removed from the version that holds it)."""
    store = DocumentStore(tmp_path)
    doc = store.create({"text": "a"}, None)[0]["document_id"]
    store.move(doc, Status.TRAINING, attempts=2)
    store.move(doc, status)
    erased = []
    assert recovery.resumable(store, retries=1, holding={doc: 3}.get,
                              erase=lambda *args: erased.append(args)) == []
    assert store.get(doc)["status"] == "committed" and store.get(doc)["version"] == 3 and erased == []


def test_a_removal_its_version_holds_erases_its_target_when_its_last_attempt_died(tmp_path):
    """Killed after the removal's commit, before its target was erased, in the last allowed attempt: committed, and
    the target erased then (it was left unerased, and a later DELETE refused)."""
    store = DocumentStore(tmp_path)
    removal = store.create({"text": "", "removes": "d-target"}, None)[0]["document_id"]
    store.move(removal, Status.TRAINING, attempts=2)
    erased = []
    assert recovery.resumable(store, retries=1, holding={removal: 4}.get,
                              erase=lambda *args: erased.append(args)) == []
    assert store.get(removal)["status"] == "committed" and erased == [("d-target", 4)]
