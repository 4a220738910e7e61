"""An owner's withdrawal and a worker's move of one document, from two stores at once (SQLite and PostgreSQL):
each is one conditional write, so exactly one of them happens, whole."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from core.documents import DocumentStore


def raced(stores: list[DocumentStore], ids: list[str], worker: str, owner: str) -> list[tuple]:
    """Per document, what a worker's conditional write from one store and its owner's from another returned, run at
    once over the documents from either end, so that they meet on some document."""
    with ThreadPoolExecutor(2) as pool:
        by_worker = pool.submit(lambda: [getattr(stores[0], worker)(d) for d in ids])
        by_owner = pool.submit(lambda: [getattr(stores[1], owner)(d) for d in reversed(ids)])
        return list(zip(ids, by_worker.result(), by_owner.result()[::-1]))


def test_a_worker_starting_a_document_and_its_owner_withdrawing_it_at_once_one_wins_whole(tmp_path, database_url):
    """`claim` (a worker starts the attempt) and `withdraw` (its owner's DELETE) on one queued document from two
    stores at once: exactly one of them moves it, and the record says which (never trained once withdrawn)."""
    stores = [DocumentStore(tmp_path, database_url), DocumentStore(tmp_path, database_url)]
    queued = [stores[0].create({"text": f"document {i}"}, None)[0]["document_id"] for i in range(40)]
    results = raced(stores, queued, "claim", "withdraw")
    for document_id, by_worker, by_owner in results:
        assert (by_worker is None) != (by_owner is None), document_id
        record = stores[0].get(document_id)
        assert record["status"] == ("training" if by_worker else "rejected")
        assert record["attempts"] == (1 if by_worker else 0)
        assert record.get("withdrawn", False) == (by_owner is not None)
    assert stores[1].withdraw(queued[0]) is None  # queued no more: training, or withdrawn already
    assert all(stores[0].claim(d) is None for d, _, by_owner in results if by_owner)  # final


def test_a_worker_taking_a_document_to_its_gate_and_its_owner_withdrawing_it_at_once_one_wins_whole(tmp_path,
                                                                                                     database_url):
    """`to_gate` (a worker's trained candidate goes to the gate) and `ask_to_withdraw` (its owner's DELETE while it
    trains) on one document from two stores at once: each writes whole, so a worker never gates a document whose
    owner was told it will be withdrawn; a withdrawal after the move marks the document at its gate
    (`to_commit` then refuses it)."""
    stores = [DocumentStore(tmp_path, database_url), DocumentStore(tmp_path, database_url)]
    training = [stores[0].create({"text": f"document {i}"}, None)[0]["document_id"] for i in range(40)]
    for document_id in training:
        stores[0].claim(document_id)
    results = raced(stores, training, "to_gate", "ask_to_withdraw")
    for document_id, by_worker, by_owner in results:
        assert by_owner is not None or by_worker is not None, document_id
        record = stores[0].get(document_id)
        assert (record["status"], record.get("withdrawing", False)) == ("evaluating" if by_worker else "training",
                                                                        by_owner is not None)
        assert by_worker is None or not by_worker.get("withdrawing")  # gated only while not asked
    assert all(stores[1].ask_to_withdraw(d) for d, by_worker, by_owner in results if by_worker and not by_owner)


def test_a_worker_committing_a_document_its_gate_accepted_and_its_owner_withdrawing_it_one_wins_whole(tmp_path,
                                                                                                       database_url):
    """`to_commit` (the gate accepted the candidate) and `ask_to_withdraw` (its owner's DELETE during the gate) on
    one document at its gate from two stores at once: exactly one writes, so a document whose owner was told it will
    be withdrawn is never committed, and one being committed is not marked."""
    stores = [DocumentStore(tmp_path, database_url), DocumentStore(tmp_path, database_url)]
    gated = [stores[0].create({"text": f"document {i}"}, None)[0]["document_id"] for i in range(40)]
    for document_id in gated:
        stores[0].claim(document_id)
        stores[0].to_gate(document_id)
    results = raced(stores, gated, "to_commit", "ask_to_withdraw")
    for document_id, by_worker, by_owner in results:
        assert (by_worker is None) != (by_owner is None), document_id
        record = stores[0].get(document_id)
        assert record["status"] == "evaluating"
        assert (record.get("committing", False), record.get("withdrawing", False)) == (by_worker is not None,
                                                                                       by_owner is not None)
    assert all(stores[1].ask_to_withdraw(d) is None for d, by_worker, _ in results if by_worker)
    assert all(stores[0].to_commit(d) is None for d, _, by_owner in results if by_owner)
    again = stores[0].create({"text": "document again"}, None)[0]["document_id"]  # not left to the race's winners
    stores[0].claim(again)
    stores[0].to_gate(again)
    assert stores[0].to_commit(again)["committing"] and stores[1].ask_to_withdraw(again) is None
    assert stores[0].claim(again)["committing"] is False  # a new attempt (its worker died): may be withdrawn again
    assert stores[1].ask_to_withdraw(again)["withdrawing"]
