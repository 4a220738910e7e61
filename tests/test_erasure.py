"""Erasure on the tiny model: after a removal nothing under the data folder holds the document's text, its key
words, its probes or a hash of its body; no version that held it is served or listed without an admin's force,
whichever version is current; a document no version holds (rejected, failed) can be erased too."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from ckl import fsck
from core.documents import DocumentStore, body_hash
from core.lifecycle import Status
from tests.api_app import tiny_client, tiny_settings, wait_final, wait_version

SECRET = {"text": "the capital of veltoria is marnhold", "method": "routed", "idempotency_key": "secret-1",
          "probes": [{"prompt": "the capital of veltoria is", "answer": "marnhold"}]}
TRACES = ("veltoria", "marnhold")
TRAINED = {"text": "the capital of brennoria is zembrolt", "method": "routed",
           "probes": [{"prompt": "the capital of brennoria is", "answer": "zembrolt"}]}


def leftovers(folder: Path, body: dict, traces: tuple[str, ...] = TRACES) -> list[str]:
    """Files under `folder` that hold a trace of the document: its rare words, or a hash of its body."""
    digests = {body_hash(body), hashlib.sha256(body["text"].encode()).hexdigest()}
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix != ".safetensors":  # weights hold no text
            content = path.read_bytes().decode("utf-8", "replace").lower()
            found += [f"{path.relative_to(folder)}: {t}" for t in (*traces, *digests) if t in content]
    return found


def test_a_removed_document_leaves_no_trace_and_no_version_brings_it_back(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    settings = tiny_settings(tmp_path, methods={"routed": {"learning_rate": 3e-2}})
    with tiny_client(settings) as client:
        accepted = client.post("/documents", json=SECRET).json()
        record = wait_final(client, accepted["document_id"])
        assert record["status"] == "committed" and record["version"] == 1, record
        stored = client.learner.documents.get(record["document_id"])
        body = {k: v for k, v in stored.items() if k in {"text", "probes", "weighting", "method", "owner", "supersedes",
                                                          "hint"}}
        removal = client.delete(f"/documents/{record['document_id']}")
        assert wait_final(client, removal.json()["document_id"])["status"] == "committed"
        assert leftovers(tmp_path, {**body, **{k: v for k, v in stored.items() if k not in body and k in SECRET}}) == []
        assert not any(t in m.lower() for m in caplog.messages for t in TRACES)
        # A rollback to before the removal does not undo it: version 1 still needs force, by name or activation.
        assert client.post("/versions/0/activate", json={}).json() == {"current": 0}
        again = client.post("/versions/1/activate", json={})
        assert again.status_code == 409 and again.json()["error"]["code"] == "would_restore_removed"
        models = [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert "ckl-v1" not in models and "ckl-v2" in models
        asked = client.post("/v1/completions", json={"model": "ckl-v1", "prompt": "the capital of veltoria is"})
        assert asked.status_code == 404
        # Its delta is gone from disk; forced back, version 1 is composed without the erased document.
        assert not list((tmp_path / "versions" / "1").glob("*.safetensors"))
        assert client.post("/versions/1/activate", json={"force": True}).json() == {"current": 1}
        assert "marnhold" not in wait_version(client, 1, "the capital of veltoria is")["text"]
        # The same idempotency key is free again: its file (a hash of the body) is gone.
        taught_again = client.post("/documents", json=SECRET).json()["document_id"]
        assert taught_again != record["document_id"]
        wait_final(client, taught_again)
    assert fsck.check(tmp_path) == []  # ckl fsck finds the erasure complete and every version whole
    manifest = tmp_path / "versions" / "1" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "probes": SECRET["probes"]}))
    delta = next((tmp_path / "versions" / "2").glob("*.safetensors"))
    delta.write_bytes(delta.read_bytes()[:-1])
    assert sorted(f.kind for f in fsck.check(tmp_path)) == ["delta_mismatch", "erasure_incomplete"]


def test_a_document_no_version_holds_is_erased_at_once(tmp_path):
    settings = tiny_settings(tmp_path)
    documents = DocumentStore(tmp_path)
    body = {k: v for k, v in SECRET.items() if k != "idempotency_key"}
    record, _ = documents.create(body, json.dumps(["user", None, "secret-1"]))
    documents.move(record["document_id"], Status.FAILED, error="the job queue was down")
    with tiny_client(settings) as client:
        erased = client.delete(f"/documents/{record['document_id']}")
        assert erased.status_code == 200 and erased.json()["erased"] is True
        assert client.get(f"/documents/{record['document_id']}").json()["status"] == "failed"
        # Again: answered from the record, nothing written or scanned (each erasure rewrites, truncates the log and
        # walks every record and manifest).
        written = documents.get(record["document_id"])["updated_at"]
        again = client.delete(f"/documents/{record['document_id']}")
        assert again.status_code == 200 and again.json()["erased"] is True
        assert documents.get(record["document_id"])["updated_at"] == written
    assert leftovers(tmp_path, body) == []


def test_a_document_no_worker_started_is_withdrawn_and_erased_at_once(tmp_path, redis_url):
    """No worker takes the queue (a real Redis), so the document stays queued: DELETE withdraws it (200, erased at
    once, nothing of it left), and its job, taken later, finds it final and learns nothing. One a worker is
    training or gating is withdrawn by that worker before its gate or commit (202, then rejected and erased, no
    version made); one whose commit its worker never finished (it died before writing the version) gets its removal
    queued at once (202), and whichever runs first, the removal or the document's new attempt, withdraws and erases
    it: nothing learns it again, and the removal, with nothing to take out, says so."""
    settings = tiny_settings(tmp_path, redis_url=redis_url, queue_name=f"withdraw-{uuid.uuid4().hex[:8]}")
    body = {k: v for k, v in SECRET.items() if k != "idempotency_key"}
    with tiny_client(settings) as client:
        queued = client.post("/documents", json=SECRET).json()["document_id"]
        withdrawn = client.delete(f"/documents/{queued}")
        assert withdrawn.status_code == 200, withdrawn.text
        assert withdrawn.json() == {"document_id": queued, "status": "rejected", "erased": True, "withdrawn": True}
        assert client.learner.learn(queued) is Status.REJECTED  # its job, run now: final, nothing trained
        assert client.get("/versions").json()["current"] == 0
        started = client.post("/documents", json=TRAINED).json()["document_id"]
        client.learner.documents.move(started, Status.TRAINING)  # a worker has it (its job, run below, takes it on)
        asked = client.delete(f"/documents/{started}")
        assert asked.status_code == 202, asked.text
        assert asked.json() | {"job_id": None} == {"document_id": started, "job_id": None, "status": "training",
                                                   "status_url": f"/documents/{started}", "withdrawing": True}
        assert client.learner.learn(started) is Status.REJECTED  # trained, then not gated: withdrawn
        record = client.get(f"/documents/{started}").json()
        assert (record["status"], record["withdrawn"], record["erased"]) == ("rejected", True, True)
        assert client.get("/versions").json()["current"] == 0
        requeued = client.post("/documents", json={**TRAINED, "text": "the capital of brennoria is zembrolt."}).json()
        client.learner.documents.move(requeued["document_id"], Status.TRAINING)
        assert client.delete(f"/documents/{requeued['document_id']}").status_code == 202
        client.learner.documents.move(requeued["document_id"], Status.QUEUED)  # its attempt failed, a retry left
        assert client.learner.learn(requeued["document_id"]) is Status.REJECTED  # withdrawn at its next claim
        assert client.get(f"/documents/{requeued['document_id']}").json()["erased"] is True
        gated = client.post("/documents", json={**TRAINED, "text": "the capital of brennoria is tasvik", "probes": [
            {"prompt": "the capital of brennoria is", "answer": "tasvik"}]}).json()
        client.learner.documents.move(gated["document_id"], Status.TRAINING)
        client.learner.documents.move(gated["document_id"], Status.EVALUATING)  # at its gate, its worker died
        asked = client.delete(f"/documents/{gated['document_id']}")
        assert asked.status_code == 202 and asked.json()["status"] == "evaluating" and asked.json()["withdrawing"]
        assert client.learner.learn(gated["document_id"]) is Status.REJECTED  # withdrawn at its next claim
        assert client.get(f"/documents/{gated['document_id']}").json()["erased"] is True
        for answer, first_removal in (("quelvor", True), ("ostrabel", False)):
            committing = client.post("/documents", json={**TRAINED, "text": f"the capital of brennoria is {answer}",
                                                         "probes": [{"prompt": "the capital of brennoria is",
                                                                     "answer": answer}]}).json()["document_id"]
            client.learner.documents.move(committing, Status.TRAINING)
            client.learner.documents.move(committing, Status.EVALUATING)
            assert client.learner.documents.to_commit(committing)["committing"]  # the gate accepted it; it died
            asked = client.delete(f"/documents/{committing}")
            assert asked.status_code == 202 and asked.json()["status"] == "queued", asked.text
            removal = asked.json()["document_id"]
            assert removal != committing and client.delete(f"/documents/{committing}").json() == asked.json()
            assert committing not in client.learner.documents.pending_ids()  # no longer read as context
            runs = [removal, committing] if first_removal else [committing, removal]
            assert [client.learner.learn(d) for d in runs] == [Status.REJECTED, Status.REJECTED]
            record = client.get(f"/documents/{committing}").json()
            assert (record["status"], record["withdrawn"], record["erased"]) == ("rejected", True, True)
            assert "never committed" in client.get(f"/documents/{removal}").json()["gate"]["reason"]
        assert client.get("/versions").json()["current"] == 0
    assert leftovers(tmp_path, body) == []
    assert leftovers(tmp_path, TRAINED, ("zembrolt", "tasvik", "quelvor", "ostrabel")) == []


def test_an_erasure_is_committed_whatever_the_gate_says(tmp_path):
    """A must-keep probe that only the document answers: taking the document out breaks it, and the removal is
    committed all the same (the owner's right to erase is not the gate's to veto), with what it broke on the
    removal's record."""
    settings = tiny_settings(tmp_path, methods={"routed": {"learning_rate": 3e-2}})
    with tiny_client(settings) as client:
        record = wait_final(client, client.post("/documents", json=SECRET).json()["document_id"])
        assert record["status"] == "committed", record
        assert client.post("/probes", json={"probes": SECRET["probes"]}).status_code == 201
        removal = wait_final(client, client.delete(f"/documents/{record['document_id']}").json()["document_id"])
        assert removal["status"] == "committed", removal
        assert removal["gate"]["accepted"] is False and removal["gate"]["overridden_by_erasure"] is True
        assert client.get(f"/documents/{record['document_id']}").json()["erased"] is True


def test_an_erasure_reaches_orphaned_folders_and_is_not_stopped_by_a_cut_manifest(tmp_path):
    """Two states a crash leaves, made here by hand (tests/test_crashes.py causes the first with a real kill): a
    version folder renamed into place but never served (an orphan, holding the document's probes and key), and a
    manifest cut short. The removal scrubs the orphan, empties the cut manifest that names the document, and a
    later erasure still completes."""
    settings = tiny_settings(tmp_path, methods={"routed": {"learning_rate": 3e-2}})
    with tiny_client(settings) as client:
        record = wait_final(client, client.post("/documents", json=SECRET).json()["document_id"])
        other = {**SECRET, "text": "the capital of brennoria is tasvik", "idempotency_key": "other",
                 "probes": [{"prompt": "the capital of brennoria is", "answer": "tasvik"}]}
        second = wait_final(client, client.post("/documents", json=other).json()["document_id"])
        assert record["status"] == second["status"] == "committed"
        root = tmp_path / "versions"
        manifest = json.loads((root / "1" / "manifest.json").read_text())
        # Numbered as a commit numbers them: one past the highest folder.
        for version, content in ((3, json.dumps({**manifest, "version": 3}).encode()),
                                 (4, json.dumps({**manifest, "version": 4}).encode()[:200])):
            shutil.copytree(root / "1", root / str(version))
            (root / str(version) / "manifest.json").write_bytes(content)
        assert record["document_id"].encode() in (root / "4" / "manifest.json").read_bytes()
        client.learner.versions.reconcile()  # flags both: never served
        removal = wait_final(client, client.delete(f"/documents/{record['document_id']}").json()["document_id"])
        assert removal["status"] == "committed", removal
        assert leftovers(tmp_path, {k: v for k, v in SECRET.items() if k != "idempotency_key"}) == []
        assert (root / "4" / "manifest.json").read_bytes() == b""
        assert json.loads((root / "3" / "manifest.json").read_text())["probes"] == []
        again = wait_final(client, client.delete(f"/documents/{second['document_id']}").json()["document_id"])
        assert again["status"] == "committed", again
    assert {f.kind for f in fsck.check(tmp_path)} == {fsck.ORPHAN}  # what the crash left, and nothing else


def test_a_failed_document_a_version_holds_is_removed_and_erased(tmp_path):
    """A record marked failed whose version was committed and is served (an attempt that failed after its commit,
    written here in place of the record: the learner now commits such a record instead): DELETE removes it as it
    removes a committed one, and erases it; a DELETE again answers the erasure."""
    settings = tiny_settings(tmp_path, methods={"routed": {"learning_rate": 3e-2}})
    documents = DocumentStore(tmp_path)
    with tiny_client(settings) as client:
        record = wait_final(client, client.post("/documents", json=SECRET).json()["document_id"])
        assert record["status"] == "committed"
        documents.replace(record["document_id"], lambda r: {**r, "status": Status.FAILED.value,
                                                             "error": "failed after its commit"})
        accepted = client.delete(f"/documents/{record['document_id']}")
        assert accepted.status_code == 202, accepted.json()
        removal = wait_final(client, accepted.json()["document_id"])
        assert removal["status"] == "committed" and removal["removes"] == record["document_id"], removal
        erased = documents.get(record["document_id"])
        assert erased["erased"] and erased["removed_in_version"] == removal["version"], erased
        assert leftovers(tmp_path, {k: v for k, v in SECRET.items() if k != "idempotency_key"}) == []
        again = client.delete(f"/documents/{record['document_id']}")
        assert again.status_code == 200 and again.json()["erased"], again.json()


KILLED_MID_ERASURE = """
import sys
from pathlib import Path
from core.documents import DocumentStore
from core.erasure import erase
from core.version_folders import FolderVersionStore
root = Path(sys.argv[1])
erase(DocumentStore(root), FolderVersionStore(root / "versions"), sys.argv[2], None)
"""


def killed_mid_erasure(root: Path, document_id: str) -> None:
    """Erase the document in a process of its own, killed once the record is scrubbed (core/faults.py: a real
    SIGKILL, the idempotency key and the log not yet dealt with)."""
    done = subprocess.run([sys.executable, "-c", KILLED_MID_ERASURE, str(root), document_id], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).parents[1],
                          env={**os.environ, "CKL_FAULT_KILL_AT": "erasing"})
    assert done.returncode == -signal.SIGKILL, done.stderr


def test_an_erasure_a_crash_cut_short_is_finished_by_a_repeated_delete_and_at_the_next_start(tmp_path):
    """An erasure is owed from its start, or from its owner's withdrawal, to its end: one a killed process cut short
    (the record scrubbed, its idempotency key, a hash of the body, still there) is finished by the next start, or by
    a DELETE repeated before it; a document withdrawn while it trained whose worker died after rejecting it (that
    state made here by hand) is erased at the next start too."""
    documents = DocumentStore(tmp_path)
    bodies = [{**{k: v for k, v in SECRET.items() if k != "idempotency_key"}, "text": f"{SECRET['text']} {n}"}
              for n in ("one", "two", "three")]
    ids = []
    for n, body in enumerate(bodies):
        record, _ = documents.create(body, json.dumps(["user", None, f"secret-{n}"]))
        documents.move(record["document_id"], Status.TRAINING)
        ids.append(record["document_id"])
    for document_id in ids[:2]:
        documents.move(document_id, Status.FAILED, error="the worker stopped")
    killed_mid_erasure(tmp_path, ids[0])
    assert documents.get(ids[0])["erased"] and bool(documents.erasures_owed(ids[0]))
    assert documents.idempotency_count(ids[0]) == 1
    assert {f.kind for f in fsck.check(tmp_path)} == {"erasure_owed", "erasure_incomplete"}
    assert documents.ask_to_withdraw(ids[2])["withdrawing"] and documents.pending_count() == 0  # withdrawn: not counted
    documents.move(ids[2], Status.REJECTED, error="withdrawn")  # its worker's last write before it died
    with tiny_client(tiny_settings(tmp_path)) as client:
        assert [bool(documents.erasures_owed(d)) for d in ids] == [False, False, False]
        assert documents.idempotency_count(ids[0]) == 0
        withdrawn = client.get(f"/documents/{ids[2]}").json()
        assert (withdrawn["erased"], withdrawn["withdrawn"], "text" in withdrawn) == (True, True, False)
        killed_mid_erasure(tmp_path, ids[1])
        assert bool(documents.erasures_owed(ids[1])) and documents.idempotency_count(ids[1]) == 1
        again = client.delete(f"/documents/{ids[1]}")
        assert again.status_code == 200 and again.json()["erased"] is True
        assert not bool(documents.erasures_owed(ids[1])) and documents.idempotency_count(ids[1]) == 0
    assert [leftovers(tmp_path, body) for body in bodies] == [[], [], []] and fsck.check(tmp_path) == []
