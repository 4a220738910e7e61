"""Faults on the tiny model: a commit whose record update was lost, a truncated delta, a document the
embedded worker died on at every attempt. Each fault is made by editing the data folder as the crash
would have left it (a kill at that exact point cannot be timed from a test)."""

import pytest

from core.documents import DocumentStore
from core.lifecycle import Status
from core.versions import AlreadyCommitted
from tests.api_app import tiny_client, tiny_settings
from tests.test_learner import FACT, submit
from tests.tiny import tiny_loaded
from workers.learner import Learner


def test_a_document_is_committed_once_even_when_its_record_missed_the_commit(tmp_path):
    learner = Learner(tiny_settings(tmp_path), loaded=tiny_loaded())
    doc = submit(learner)
    assert learner.learn(doc) == "committed"
    # Killed after the commit, before the record said so: the record as that crash left it (a move the lifecycle
    # refuses, so it is written in place, as erasure writes).
    learner.documents.replace(doc, lambda record: {**record, "status": "evaluating", "version": None})
    assert learner.learn(doc) == "committed"
    assert learner.documents.get(doc)["version"] == 1 and learner.versions.versions() == [0, 1]
    with pytest.raises(AlreadyCommitted):
        learner.versions.commit(1, {}, {"documents": [doc]}, "adapter.safetensors")


def test_a_truncated_delta_means_serving_the_newest_version_that_verifies(tmp_path):
    settings = tiny_settings(tmp_path)
    learner = Learner(settings, loaded=tiny_loaded())
    first = submit(learner)
    assert learner.learn(first) == "committed"
    assert learner.learn(submit(learner, {**FACT, "text": FACT["text"] + "."})) == "committed"
    delta = tmp_path / "versions" / "2" / "adapter.safetensors"
    delta.write_bytes(delta.read_bytes()[:100])  # a power cut: the name is there, the bytes are not
    with tiny_client(settings) as client:
        ready = client.get("/ready").json()
        assert ready["knowledge_version"] == 1 and ready["fallback"]["from"] == 2 and ready["fallback"]["to"] == 1
        assert "reason" not in ready["fallback"]  # the reason is for an admin
        versions = client.get("/versions").json()
        assert versions["current"] == 1 and "hash" in versions["fallback"]["reason"]


@pytest.mark.parametrize("damage", ["empty CURRENT", "no manifest", "empty manifest"])
def test_an_unreadable_current_version_means_serving_the_newest_that_loads(tmp_path, damage):
    settings = tiny_settings(tmp_path)
    learner = Learner(settings, loaded=tiny_loaded())
    assert learner.learn(submit(learner)) == "committed"
    assert learner.learn(submit(learner, {**FACT, "text": FACT["text"] + "."})) == "committed"
    versions = tmp_path / "versions"
    if damage == "empty CURRENT":
        (versions / "CURRENT").write_text("")
    elif damage == "no manifest":
        (versions / "2" / "manifest.json").unlink()
    else:
        (versions / "2" / "manifest.json").write_text("")
    with tiny_client(settings) as client:
        ready = client.get("/ready").json()
        assert ready["ready"] is True and ready["fallback"]["to"] == (2 if damage == "empty CURRENT" else 1)
        assert client.get("/versions").json()["current"] == ready["knowledge_version"]


def test_the_embedded_worker_gives_up_on_a_document_it_died_on_at_every_attempt(tmp_path):
    settings = tiny_settings(tmp_path, job_retries=1)
    documents = DocumentStore(tmp_path)
    record, _ = documents.create(FACT, None)
    documents.move(record["document_id"], Status.TRAINING, attempts=2)  # the process died twice in it
    with tiny_client(settings) as client:
        record = client.get(f"/documents/{record['document_id']}").json()
        assert record["status"] == "failed" and "all 2 attempts" in record["error"]


def test_two_learners_on_one_data_folder_take_turns_and_commit_each_document_once(tmp_path):
    """Two workers (threads here, each with its own model) handed the same document at once."""
    import threading

    settings = tiny_settings(tmp_path)
    first, second = Learner(settings, loaded=tiny_loaded()), Learner(settings, loaded=tiny_loaded())
    doc = submit(first)
    results = []
    threads = [threading.Thread(target=lambda w=w: results.append(w.learn(doc))) for w in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["committed", "committed"] and first.versions.versions() == [0, 1]
    assert first.documents.get(doc)["attempts"] == 1  # the second found it finished and did not train


def test_a_version_folder_never_made_current_is_flagged_an_orphan_and_its_number_is_not_reused(tmp_path):
    import shutil

    from core.fileio import read_json, write_json_atomic
    from core.version_folders import MANIFEST_FILE
    from core.versions import UnknownVersion

    learner = Learner(tiny_settings(tmp_path), loaded=tiny_loaded())
    assert learner.learn(submit(learner)) == "committed"
    store = learner.versions
    # A crash between the rename and the pointer move: folder 2 is in place, CURRENT still names 1.
    shutil.copytree(tmp_path / "versions" / "1", tmp_path / "versions" / "2")
    write_json_atomic(tmp_path / "versions" / "2" / MANIFEST_FILE,
                      {**read_json(tmp_path / "versions" / "1" / MANIFEST_FILE), "version": 2})
    assert store.reconcile() == [2] and store.reconcile() == []
    assert store.versions() == [0, 1] and store.orphans() == [2] and not store.exists(2)
    with pytest.raises(UnknownVersion):
        store.activate(2)
    assert learner.learn(submit(learner, {**FACT, "text": FACT["text"] + "."})) == "committed"
    assert store.versions() == [0, 1, 3] and store.manifest(3)["parent"] == 1
    store.activate(1)
    assert store.reconcile() == [] and store.versions() == [0, 1, 3]  # versions rolled back from stay served
    store.activate(3)
    write_json_atomic(tmp_path / "versions" / "served.json", [1])  # killed after the pointer moved, before the list
    assert store.reconcile() == [] and store.versions() == [0, 1, 3]
