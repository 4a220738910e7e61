"""Versions in the database and deltas in an S3 store (moto's server over HTTP): what the folder store does, the
same way, with nothing shared through a folder; each store opened here has a data folder of its own."""
from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from sqlalchemy import create_engine

from core.leases import LEARNER_LEASE, AdvisoryLease
from core.objects import CachedObjects
from core.settings import Settings
from core.storage import open_suites, open_versions
from core.version_tables import DatabaseVersionStore, delta_key
from core.versions import AlreadyCommitted, ParentMoved, UnknownVersion, VersionStore
from serving.forgetting import not_learned, replacements
from tests.conftest import emptied

MANIFEST = {"probes": [], "method": "adapter", "metrics": {}}


@pytest.fixture(params=["sqlite", "postgresql"])
def opener(request, tmp_path, object_store_url) -> Callable[[], VersionStore]:
    """Opens the shared store again, each time from a new data folder (another process on another machine)."""
    url = None
    if request.param == "postgresql":
        url = emptied(request.getfixturevalue("postgres_url"))
    else:
        url = f"sqlite:///{tmp_path / 'shared.db'}"
    count = iter(range(100))

    def open_store() -> VersionStore:
        data = tmp_path / f"machine-{next(count)}"
        return open_versions(Settings(data_dir=data, database_url=url, object_store_url=object_store_url))
    return open_store


def commit(store: VersionStore, parent: int, document: str, value: float = 0.0, **fields) -> int:
    return store.commit(parent, {"a": torch.full((2, 2), value)}, {**MANIFEST, "documents": [document], **fields},
                        "adapter.safetensors")


def test_a_commit_is_served_by_every_process_and_refused_from_a_moved_parent(opener):
    writer, reader = opener(), opener()
    assert isinstance(writer, DatabaseVersionStore) and reader.versions() == [0] and reader.current() == 0
    assert commit(writer, 0, "d1", 1.0) == 1
    assert reader.current() == 1 and reader.versions() == [0, 1]
    assert torch.equal(reader.load_delta(1)["a"], torch.ones(2, 2))  # fetched from the object store
    with pytest.raises(ParentMoved):
        commit(reader, 0, "d2")
    with pytest.raises(AlreadyCommitted):
        commit(reader, 1, "d1")
    assert commit(reader, 1, "d2", 2.0) == 2
    writer.activate(1)
    assert reader.current() == 1 and [m["documents"] for m in reader.lineage(2)] == [["d1"], ["d2"]]
    with pytest.raises(UnknownVersion):
        reader.activate(7)
    assert [(e["event"], e["version"], e["from"]) for e in reader.events()] == \
        [("commit", 1, 0), ("commit", 2, 1), ("activate", 1, 2)]
    assert reader.orphans() == [] and reader.reconcile() == []


def test_two_processes_committing_from_one_parent_get_one_version(opener):
    """Commits race in threads of two stores: the database's writers lock lets one win, the others see ParentMoved."""
    stores, won, moved = [opener() for _ in range(4)], [], []

    def race(i: int) -> None:
        try:
            won.append(commit(stores[i], 0, f"d{i}"))
        except ParentMoved:
            moved.append(i)
    threads = [threading.Thread(target=race, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert won == [1] and len(moved) == 3 and stores[0].versions() == [0, 1]
    store = stores[0]
    assert isinstance(store, DatabaseVersionStore)  # a refused commit deleted its object: one is left
    assert store.objects.store.names() == [delta_key(store.manifest(1))]


def test_a_delta_is_checked_against_its_hash_and_a_bad_local_copy_fetched_again(opener):
    store = opener()
    commit(store, 0, "d1", 3.0)
    assert isinstance(store, DatabaseVersionStore)
    key = delta_key(store.manifest(1))
    copy = store.objects.folder / key
    copy.write_bytes(copy.read_bytes()[:-4] + b"\x00\x00\x80\x3f")  # the local copy damaged
    assert torch.equal(store.load_delta(1)["a"], torch.full((2, 2), 3.0))
    store.objects.store.put(key, b"not the delta")  # and the stored object too
    store.objects.forget(key)
    with pytest.raises(ValueError, match="hash"):
        store.load_delta(1)


def test_an_erasure_rewrite_is_seen_by_every_process_and_the_delta_leaves_the_object_store(opener):
    writer, reader = opener(), opener()
    commit(writer, 0, "d1", 1.0, facts=[{"prompt": "Tolvane employs", "answer": "340", "learned": False}],
           routing={"rank": 4})
    commit(writer, 1, "d2", 2.0, replaces=[{"document_id": "d1", "prompt": "Tolvane is in", "answer": "Harwick"}])
    assert [r["document_id"] for r in not_learned(reader, 2)] == ["d1"] and len(replacements(reader, 2)) == 1
    reader.load_delta(1)
    assert isinstance(reader, DatabaseVersionStore)
    copy = reader.objects.folder / delta_key(reader.manifest(1))
    assert copy.exists()  # the reader's local copy
    writer.rewrite_manifest(1, {**writer.manifest(1), "facts": [], "erased_in": 3})
    writer.drop_delta(1)
    assert not not_learned(reader, 2) and reader.manifest_mentions(2, "Harwick")
    assert not copy.exists()  # deleted once the reader saw the rewrite
    assert reader.load_delta(1) == {}  # an erased document's delta adds nothing
    key = delta_key(writer.manifest(1))
    assert isinstance(writer, DatabaseVersionStore) and writer.objects.store.get(key) is None
    writer.empty_manifest(2)
    with pytest.raises(UnknownVersion):
        reader.manifest(2)


def test_the_delta_cache_keeps_its_bound_least_recently_read_first_out(tmp_path, object_store_url):
    from core.objects import S3Objects

    cache = CachedObjects(S3Objects(object_store_url), tmp_path / "cache", max_bytes=250)
    for name in "abc":
        cache.put(name, name.encode() * 100)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")) == ["b", "c"]
    assert cache.get("b") == b"b" * 100 and cache.get("a") == b"a" * 100  # fetched again; b read last before it
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")) == ["a", "b"]
    assert CachedObjects(S3Objects(object_store_url), tmp_path / "cache", 250).get("missing") is None


def test_the_object_store_url_is_checked_at_start(tmp_path, s3_endpoint):
    from botocore.exceptions import ClientError

    from core.objects import S3Objects

    with pytest.raises(ValueError, match="s3://"):
        S3Objects("http://bucket/prefix")
    with pytest.raises(ClientError):
        S3Objects(f"s3://no-such-bucket?endpoint={s3_endpoint}")


def test_the_probe_suites_are_shared_through_the_database(tmp_path, object_store_url, postgres_url):
    emptied(postgres_url)

    def settings(machine: str) -> Settings:
        return Settings(data_dir=tmp_path / machine, database_url=postgres_url, object_store_url=object_store_url)
    from core.probes import from_json
    added = from_json([{"prompt": "The capital of Quilor is", "answer": "Vey"}])
    open_suites(settings("api")).add_must_keep(added, cap=10)
    assert open_suites(settings("worker")).must_keep() == added
    assert not any(Path(tmp_path / "worker").rglob("*.json"))


def test_the_learner_lease_is_held_by_one_process_and_freed_when_its_holder_dies(postgres_url):
    """Two leases (two processes' sessions): the second waits while the first holds it; a holder whose connection
    is gone (a killed process) holds it no more."""
    first, second = (AdvisoryLease(create_engine(postgres_url), LEARNER_LEASE) for _ in range(2))
    order: list[str] = []
    with first:
        waiting = threading.Thread(target=lambda: second.__enter__() and order.append("second"))
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive() and not order
        with first:  # re-entered by its holder
            order.append("first")
    waiting.join(10)
    assert order == ["first", "second"]
    second._connection.invalidate()  # the holder's connection lost, as when its process is killed
    second._connection = None
    with first:
        order.append("first again")
    assert order[-1] == "first again"


def test_a_memory_version_is_served_by_a_process_that_shares_no_folder_with_its_learner(tmp_path, object_store_url,
                                                                                      postgres_url):
    """The memory method's version-0 state, made by the learner, reaches the API through the object store."""
    from core.model.served_model import ServingModel, install_committed
    from serving.generation import SamplingParams, generate
    from tests.api_app import tiny_settings
    from tests.tiny import tiny_loaded
    from workers.learner import Learner

    shared = {"database_url": emptied(postgres_url), "object_store_url": object_store_url}
    learner = Learner(tiny_settings(tmp_path / "worker", **shared), loaded=tiny_loaded())
    fact = {"text": "the capital of veltoria is marnhold", "method": "memory",
            "probes": [{"prompt": "the capital of veltoria is", "answer": "marnhold"}]}
    assert learner.learn(learner.documents.create(fact, None)[0]["document_id"]) == "committed"
    api = tiny_settings(tmp_path / "api", **shared)
    loaded = tiny_loaded()
    serving = ServingModel(loaded, api)
    install_committed(serving, versions := open_versions(api), versions.current())
    ids = loaded.tokenizer("the capital of veltoria is")["input_ids"]
    assert generate(serving, ids, SamplingParams(3, 0.0, 1.0, (), None)).text.strip().startswith("marnhold")
    made, fetched = (tmp_path / side / "memory" / "base.safetensors" for side in ("worker", "api"))
    assert fetched.read_bytes() == made.read_bytes()  # fetched, not fitted again
