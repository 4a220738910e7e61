"""The version store, the document store, weighting and the gate: pure logic, no model."""
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from sqlalchemy import select

from core.database import documents, sqlite_url
from core.documents import DocumentStore, IdempotencyConflict, body_hash, key_hash
from core.fileio import write_json_atomic
from core.lifecycle import Status
from core.namespaces import SHARED, namespace_of, within
from core.probes import ProbeSuites, from_json
from core.shared_values import FolderValues
from core.state import committed_neighbours, learned_facts, learned_manifests, same_prompt
from core.version_folders import FolderVersionStore
from core.versions import ParentMoved, UnknownVersion
from serving.forgetting import newest, not_learned, replacements, report
from tests.conftest import ROOT
from tests.database import rows
from workers import gate, weighting


def test_commit_moves_the_pointer_and_checks_the_parent(tmp_path):
    store = FolderVersionStore(tmp_path / "versions")
    assert store.current() == 0 and store.versions() == [0]
    delta = {"a": torch.ones(2, 2)}
    v1 = store.commit(0, delta, {"documents": ["d1"], "probes": [], "method": "adapter", "metrics": {}}, "adapter.safetensors")
    assert v1 == 1 and store.current() == 1
    assert torch.equal(store.load_delta(1)["a"], delta["a"])
    with pytest.raises(ParentMoved):
        store.commit(0, delta, {"documents": ["d2"], "probes": [], "method": "adapter", "metrics": {}}, "adapter.safetensors")
    assert store.versions() == [0, 1]
    store.activate(0)
    assert store.current() == 0
    with pytest.raises(UnknownVersion):
        store.activate(7)
    assert [e["event"] for e in store.events()] == ["commit", "activate"]


def test_half_written_version_is_never_listed_or_served(tmp_path):
    store = FolderVersionStore(tmp_path / "versions")
    (tmp_path / "versions" / ".tmp-1").mkdir()  # a crash before the rename
    (tmp_path / "versions" / "1").mkdir()  # or a folder without a manifest
    assert store.versions() == [0] and store.current() == 0
    assert store.commit(0, {"a": torch.zeros(1)}, {"documents": [], "probes": [], "method": "adapter", "metrics": {}}, "adapter.safetensors") == 1


def test_tampered_delta_is_refused(tmp_path):
    store = FolderVersionStore(tmp_path / "versions")
    store.commit(0, {"a": torch.zeros(3)}, {"documents": [], "probes": [], "method": "adapter", "metrics": {}}, "adapter.safetensors")
    path = tmp_path / "versions" / "1" / "adapter.safetensors"
    path.write_bytes(path.read_bytes()[:-4] + b"\x00\x00\x80\x3f")
    with pytest.raises(ValueError, match="hash"):
        store.load_delta(1)


def test_lineage_follows_parents(tmp_path):
    store = FolderVersionStore(tmp_path / "versions")
    m = {"probes": [], "method": "adapter", "metrics": {}}
    store.commit(0, {"a": torch.zeros(1)}, {**m, "documents": ["d1"]}, "adapter.safetensors")
    store.commit(1, {"a": torch.zeros(1)}, {**m, "documents": ["d2"]}, "adapter.safetensors")
    store.activate(1)
    store.commit(1, {"a": torch.zeros(1)}, {**m, "documents": ["d3"]}, "adapter.safetensors")
    assert [x["documents"] for x in store.lineage(3)] == [["d1"], ["d3"]]


def test_idempotency_key(tmp_path, database_url):
    docs = DocumentStore(tmp_path, database_url)
    first, new = docs.create({"text": "a"}, "key-1")
    again, new_again = docs.create({"text": "a"}, "key-1")
    assert new and not new_again and again["document_id"] == first["document_id"]
    with pytest.raises(IdempotencyConflict):
        docs.create({"text": "b"}, "key-1")
    assert docs.page(None, 0, 10)[0] == 1


def test_a_data_folder_of_json_records_moves_into_the_database_once(tmp_path, database_url):
    """A data folder written before the database: its records (order kept) and idempotency keys are read in, the
    files deleted, and the keys still answer."""
    records = [{"document_id": f"doc{i}", "text": f"t{i}", "status": "committed", "owner": "k", "created_at": 10.0 - i,
                "job_id": None, "timings": {"train_s": 2.0}} for i in range(3)]
    for record in records:
        write_json_atomic(tmp_path / "documents" / f"{record['document_id']}.json", record)
    write_json_atomic(tmp_path / "idempotency" / f"{key_hash('key-1')}.json",
                      {"document_id": "doc0", "body_sha256": body_hash({"text": "t0"})})
    docs = DocumentStore(tmp_path, database_url)
    assert [r["document_id"] for r in docs.page(None, 0, 10)[1]] == ["doc2", "doc1", "doc0"]  # by created_at
    assert not (tmp_path / "documents").exists() and not (tmp_path / "idempotency").exists()
    assert docs.create({"text": "t0"}, "key-1") == (records[0], False)
    again = DocumentStore(tmp_path, database_url)  # once
    assert [r["document_id"] for r in again.page(None, 0, 10)[1]] == ["doc2", "doc1", "doc0"]


def test_pages_counts_and_sums_come_from_the_database(tmp_path, database_url):
    docs = DocumentStore(tmp_path, database_url)
    made = [docs.create({"text": str(i), "owner": "a" if i % 3 else "b"}, None)[0]["document_id"] for i in range(10)]
    docs.move(made[0], Status.TRAINING)
    docs.move(made[0], Status.EVALUATING, timings={"train_s": 1.5})
    docs.move(made[0], Status.REJECTED, timings={"train_s": 1.5, "gate_s": 0.25})
    docs.move(made[1], Status.TRAINING)
    other = DocumentStore(tmp_path, database_url)  # another process's view of the same database
    assert other.counts() == {"queued": 8, "training": 1, "rejected": 1}
    assert other.pending_count() == 9 and other.pending_count("b") == 3
    assert other.timings() == {"train_s": (1, 1.5), "gate_s": (1, 0.25), "score_before_s": (0, 0.0)}
    total, page = other.page("a", offset=2, limit=3)
    mine = [d for i, d in enumerate(made) if i % 3]
    assert total == len(mine) and [r["document_id"] for r in page] == mine[2:5]
    assert [r["document_id"] for r in other.with_status(Status.QUEUED, last=2)] == made[-2:]
    assert [r["document_id"] for r in other.page(None, 0, 100)[1]] == made


def test_writers_in_several_threads_and_stores_lose_nothing_and_keep_one_order(tmp_path, database_url):
    """Two stores (two processes' or machines' views) written from four threads at once: every document and every
    move kept, each record in one place of the order, an idempotency key answered with its one document."""
    stores = [DocumentStore(tmp_path, database_url), DocumentStore(tmp_path, database_url)]

    def write(n: int) -> list[str]:
        made = []
        for i in range(25):
            record, new = stores[n % 2].create({"text": f"{n}-{i % 5 if n == 0 else i}"},
                                               f"key-{i % 5}" if n == 0 else None)
            if new:
                stores[(n + 1) % 2].move(record["document_id"], Status.TRAINING)
            made.append(record["document_id"])
        return made

    with ThreadPoolExecutor(4) as pool:
        made = [d for written in pool.map(write, range(4)) for d in written]
    records = stores[0].page(None, 0, 1000)[1]
    assert len(records) == len(set(made)) == 80  # thread 0 reused its five keys: 5 documents, not 25
    assert stores[1].counts() == {"training": 80}
    with stores[0].engine.connect() as connection:
        assert sorted(connection.scalars(select(documents.c.seq))) == list(range(1, 81))


def test_processes_starting_at_once_on_a_new_database_all_open_it(tmp_path):
    """API processes and workers started together on a new data folder: each finds or makes the tables, none
    fails because another made them between its check and its create."""
    go = tmp_path / "go"
    start = ("import pathlib, sys, time\n"
             "from core import database\n"
             "while not pathlib.Path(sys.argv[1]).exists(): time.sleep(0.001)\n"
             "database.connect(sys.argv[2])\n")
    processes = [subprocess.Popen([sys.executable, "-c", start, str(go), sqlite_url(tmp_path)], cwd=ROOT,
                                  stderr=subprocess.PIPE, text=True) for _ in range(8)]
    time.sleep(3)  # every process imported and waiting
    go.touch()
    failures = [p.communicate(timeout=60)[1] for p in processes if p.wait(timeout=60)]
    assert not failures, failures[0]
    assert {"documents", "idempotency"} <= {name for (name,) in rows(tmp_path, "SELECT name FROM sqlite_master")}


def test_oracle_weights_cover_every_occurrence_of_the_answer():
    text = "Marnhold is big. The capital is Marnhold."
    offsets = [(0, 0), (0, 8), (9, 11), (12, 15), (15, 16), (17, 20), (21, 28), (29, 31), (32, 40), (40, 41)]
    spans = weighting.answer_spans(text, ["Marnhold"])
    assert spans == [(0, 8), (32, 40)]
    assert weighting.oracle(offsets, text, ["Marnhold"]) == [0, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    assert weighting.uniform(3) == [0.0, 1.0, 1.0]


def scores(nf, learned=(), keep=(), own=(), neighbours=()):
    return gate.SuiteScores(list(nf), list(learned), list(keep), list(own), list(neighbours))


@pytest.mark.parametrize("after,accepted,failed", [
    (scores([1] * 49 + [0], [1, 1], [1], [1]), True, None),
    (scores([1] * 45 + [0] * 5, [1, 1], [1], [1]), False, "not_to_forget"),
    (scores([1] * 50, [1, 0], [1], [1]), False, "learned"),
    (scores([1] * 50, [1, 1], [0], [1]), False, "must_keep"),
    (scores([1] * 50, [1, 1], [1], [0.5]), False, "own_probes"),
    (scores([1] * 50, [1, 1], [1], [1], [1, 0.5]), False, "neighbours"),  # a known subject's other answer moved
])
def test_gate(after, accepted, failed):
    before = scores([1] * 50, [1, 1], [1], [0], [1, 1])
    decision = gate.decide(before, after, nf_version_0=1.0, nf_tolerance=0.02, learned_tolerance=0.05,
                           require_own_probes=True)
    assert decision.accepted is accepted
    if failed:
        assert decision.reason.startswith(failed)


def test_the_learned_check_holds_each_fact_to_its_own_last_passing_state():
    before = scores([1] * 50, [1] * 39 + [0], [], [0])
    lost_one = gate.decide(before, scores([1] * 50, [1] * 38 + [0, 0], [], [1]), nf_version_0=1.0, nf_tolerance=0.0,
                           learned_tolerance=0.0, require_own_probes=True)
    assert not lost_one.accepted and lost_one.reason.startswith("learned")  # 38/39 kept: "parent - 0.05" let it by
    still_failing = gate.decide(before, scores([1] * 50, [1] * 39 + [0], [], [1]), nf_version_0=1.0,
                                nf_tolerance=0.0, learned_tolerance=0.0, require_own_probes=True)
    assert still_failing.accepted  # a fact that already failed in the parent is not a new loss
    assert gate.kept_share([1, 0.5, 1], [1, 1, 0]) == (0.5, 2)


def quadratic_neighbours(manifests, namespaces):
    """The neighbours rule written as its definition (a pass over every kept neighbour per version)."""
    kept = []
    for manifest in manifests:
        namespace, asked = namespace_of(manifest), [p["prompt"] for p in manifest["probes"]]
        kept = [n for n in kept if namespace not in (SHARED, n.namespace) or not any(same_prompt(n.prompt, a)
                                                                                    for a in asked)]
        kept += from_json(manifest.get("neighbours", []), namespace)
    return [n for n in kept if within(n.namespace, namespaces)]


@pytest.mark.parametrize("seed", range(5))
def test_neighbours_kept_along_a_lineage_are_those_of_the_rule_as_written(tmp_path, seed):
    """committed_neighbours keeps an index instead of passing over all kept entries per version (linear in the
    versions, not quadratic), each version's folded from its parent's: random lineages of three namespaces, prompts
    that repeat (in other case), rollbacks and removals give, after every commit, what the rule as written gives."""
    rng = random.Random(seed)
    prompts = ["The mayor of Brannoch is", "The chief executive of Siemens is", "The capital of Quilor is",
               "Harvard University is located in"]
    store = FolderVersionStore(tmp_path)
    for version in range(1, 40):
        def probe() -> dict:
            prompt = rng.choice(prompts)
            return {"prompt": prompt.upper() if rng.random() < 0.2 else prompt, "answer": rng.choice("abc")}
        if rng.random() < 0.1:
            store.activate(rng.randrange(version))  # a branch from an earlier version
        taught = [m["documents"][0] for m in learned_manifests(store, store.current()) if not m.get("removes")]
        manifest = {"documents": [f"d{version}"], "method": "routed", "namespace": rng.choice([SHARED, "a", "b"]),
                    "probes": [probe() for _ in range(rng.randint(0, 2))],
                    "neighbours": [probe() for _ in range(rng.randint(0, 3))]}
        if taught and rng.random() < 0.1:
            manifest = {**manifest, "probes": [], "neighbours": [], "removes": rng.choice(taught)}
        store.commit(store.current(), {"x": torch.zeros(1)}, manifest, "routed_lora.safetensors")
        counted = learned_manifests(store, store.current())
        for namespaces in (None, frozenset({SHARED, "a"}), frozenset({SHARED})):
            assert committed_neighbours(store, store.current(), namespaces) == \
                quadratic_neighbours(counted, namespaces), (version, namespaces)


def test_the_version_list_and_the_retention_report_come_a_page_at_a_time(tmp_path):
    store = FolderVersionStore(tmp_path / "versions")
    for version in range(1, 8):
        store.commit(version - 1, {"a": torch.zeros(1)}, {"documents": [f"d{version}"], "probes": [],
                                                          "method": "adapter", "metrics": {}}, "adapter.safetensors")
    seen, before = [], None
    while True:  # every page, newest first, each listed oldest first
        page, before = newest(store.versions(), before, 3)
        seen = page + seen
        if before is None:
            break
    assert seen == list(range(8))
    suites, records = ProbeSuites(FolderValues(tmp_path / "probes")), DocumentStore(tmp_path / "documents")
    first = report(store, suites, records, limit=3)
    assert [row["version"] for row in first["history"]] == [5, 6, 7] and first["history_before"] == 5
    second = report(store, suites, records, limit=3, before=first["history_before"])
    assert [row["version"] for row in second["history"]] == [2, 3, 4] and second["history_before"] == 2
    assert second["current_version"] == 7 and second["learned"] == first["learned"]


def test_what_each_version_keeps_of_its_lineage_is_what_a_walk_of_its_lineage_gives(tmp_path):
    """The replaced and not-learned lists, the learned facts and the neighbour prompts, each folded from the parent's
    (core/state.py: folded), against a store that kept nothing and walks the whole lineage."""
    store = FolderVersionStore(tmp_path / "versions")

    def lists(versions: FolderVersionStore) -> tuple:
        current = versions.current()
        return (replacements(versions, current), not_learned(versions, current), learned_facts(versions, current),
                committed_neighbours(versions, current))

    def commit(document: str, probes=(), neighbours=(), **fields) -> None:
        manifest = {"documents": [document], "probes": [{"prompt": p, "answer": a} for p, a in probes],
                    "neighbours": [{"prompt": p, "answer": a} for p, a in neighbours], "method": "adapter",
                    "metrics": {}, **fields}
        lists(store)  # the parent's kept
        store.commit(store.current(), {"a": torch.zeros(1)}, manifest, "adapter.safetensors")
        walked, lineage = [], store.lineage
        store.lineage = lambda version: walked.append(version) or lineage(version)  # counts the walks
        assert lists(store) == lists(FolderVersionStore(tmp_path / "versions")), document
        del store.lineage
        # A new version's lists are its parent's with one step more; a removal's learned facts and neighbours are
        # walked (what the removed document replaced comes back).
        assert len(walked) == (2 if "removes" in fields else 0), (document, walked)

    partly = [{"prompt": "Tolvane employs", "answer": "340", "learned": False}]
    commit("d1", [("Tolvane is in", "Harwick")], [("Ostrel is in", "Brae")], facts=partly)
    commit("d2", [("Tolvane is in", "Ostmark"), ("Ostrel is in", "Kell")], [("Ostrel is in", "Brae")],
           replaces=[{"document_id": "d1", "prompt": "Tolvane is in", "answer": "Harwick"}], facts=partly)
    commit("d3", [("Tolvane is led by", "Ilse")], [("Ostrel is in", "Brae")], namespace="tenant-a",
           replaces=[{"document_id": "d2", "prompt": "Tolvane is led by", "answer": "Ilse"}])
    assert [f.probe.answer for f in learned_facts(store, 3)] == ["Ostmark", "Kell", "Ilse"]
    assert [n.namespace for n in committed_neighbours(store, 3)] == [SHARED, "tenant-a"]  # d2 asked d1's anew
    commit("r1", removes="d2")  # d2's facts, replacement, unlearned fact and asking anew leave with it
    assert [r["replaced_by"] for r in replacements(store, 4)] == ["d3"]
    assert [r["document_id"] for r in not_learned(store, 4)] == ["d1"]
    assert [f.probe.answer for f in learned_facts(store, 4)] == ["Harwick", "Ilse"]
    store.activate(2)  # back to before d3: a branch from there
    commit("d4", [("Ostrel is in", "Vey")], replaces=[{"document_id": "d1", "prompt": "Tolvane employs",
                                                        "answer": "340"}])
    assert [r["replaced_by"] for r in replacements(store, 5)] == ["d2", "d4"]
    store.rewrite_manifest(1, {**store.manifest(1), "facts": []})  # an erasure's rewrite: nothing kept holds
    assert not_learned(store, 5) == not_learned(FolderVersionStore(tmp_path / "versions"), 5)
    assert [r["document_id"] for r in not_learned(store, 5)] == ["d2"]


def test_a_store_sees_the_versions_another_process_committed_since_it_last_looked(tmp_path):
    """After its first look, a store looks only above the highest version it has seen (a commit numbers its folder
    one past the highest): what another process commits in between is listed all the same."""
    reader, writer = FolderVersionStore(tmp_path / "versions"), FolderVersionStore(tmp_path / "versions")
    assert reader.versions() == [0]

    def commit() -> None:
        writer.commit(writer.current(), {"a": torch.zeros(1)}, {"documents": [f"d{writer.current()}"], "probes": [],
                                                                "method": "adapter", "metrics": {}}, "a.safetensors")
    commit()
    assert reader.versions() == [0, 1]
    commit()
    commit()
    assert reader.versions() == [0, 1, 2, 3] and reader.current() == 3
    # A folder renamed into place while a first look read the names, and missed by it, is found by the next.
    late = FolderVersionStore(tmp_path / "versions")
    (tmp_path / "versions" / "2").rename(tmp_path / "versions" / ".moved")
    assert late.versions() == [0, 1, 3]
    (tmp_path / "versions" / ".moved").rename(tmp_path / "versions" / "2")
    assert late.versions() == [0, 1, 2, 3]
