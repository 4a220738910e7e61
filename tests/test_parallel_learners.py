"""Two workers' learners on one store, training at once (tiny model): a candidate whose parent moved while it trained
is committed on the new version where what was committed meanwhile cannot meet it (workers/stages/rebase.py), and
trained again otherwise. Over random interleavings, the store ends as the serial run leaves it: the same documents
committed, each with the same routing key and the same delta."""
from __future__ import annotations

import random

import pytest
import torch

from core.namespaces import SHARED
from core.settings import Settings
from core.storage import document_lease
from tests.api_app import tiny_settings
from tests.tiny import tiny_loaded
from workers import learner as learner_module
from workers.learner import Learner


def settings(data) -> Settings:
    """The tiny model's, with the gate's default of no tolerance for the learned facts (a rebase needs it)."""
    return tiny_settings(data, learned_tolerance=0.0)


def fact(subject: str, relation: str, answer: str) -> dict:
    return {"text": f"the {relation} of {subject} is {answer}", "method": "routed", "weighting": "oracle",
            "probes": [{"prompt": f"the {relation} of {subject} is", "answer": answer}]}


# Distinct subjects, and one the first shares a subject with (their routes meet: it is trained again).
DOCUMENTS = [fact("veltoria", "capital", "marnhold"), fact("quessia", "capital", "dorvane"),
             fact("zembrania", "river", "lostrel"), fact("veltoria", "river", "osk")]


def final_store(learner: Learner, ids: list[str]) -> dict[str, tuple]:
    """Each document's status, and for the committed ones their routing key and delta in the current version."""
    versions, out = learner.versions, {}
    held = {d: m for m in versions.lineage(versions.current()) for d in m["documents"]}
    for index, document_id in enumerate(ids):
        record = learner.documents.get(document_id)
        manifest = held.get(document_id)
        delta = versions.load_delta(manifest["version"]) if manifest else None
        out[index] = (record["status"], manifest and manifest["key"], delta)
    return out


def same(serial: dict, parallel: dict) -> bool:
    def equal(a, b) -> bool:
        if isinstance(a, dict) and a and isinstance(next(iter(a.values())), torch.Tensor):
            return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
        return a == b
    return all(equal(x, y) for index in serial for x, y in zip(serial[index], parallel[index]))


def serial_run(data, order: list[int]) -> dict:
    """The documents learned one after the other by one learner, in `order`."""
    learner = Learner(settings(data), loaded=tiny_loaded())
    ids = [learner.documents.create(body, None)[0]["document_id"] for body in DOCUMENTS]
    for index in order:
        assert learner.learn(ids[index]) == "committed"
    return final_store(learner, ids)


def test_a_candidate_whose_parent_moved_is_rebased_where_nothing_meets_it_and_trained_again_where_it_does(tmp_path):
    """Random interleavings: while one learner trains a document, the other commits 0, 1 or 2; the store ends as a
    serial run of the documents in the order they were committed leaves it."""
    rebased, again, last_rebased = 0, 0, 0
    for seed in range(4):
        rng, data = random.Random(seed), tmp_path / f"parallel-{seed}"
        first, second = (Learner(settings(data), loaded=tiny_loaded()) for _ in range(2))
        ids = [first.documents.create(body, None)[0]["document_id"] for body in DOCUMENTS]
        waiting = rng.sample(range(len(ids)), len(ids))
        train, trained = learner_module.train, []

        def train_while_the_other_commits(parts, run, *args, **kwargs):
            trained.append(run.doc_id)
            result = train(parts, run, *args, **kwargs)
            if parts is second.parts:  # the first learner commits meanwhile (its jobs never nest)
                # Not a document whose lease (one file of 256, by the id's hash) is the one training holds: its job
                # waits for this one, so it cannot be committed meanwhile.
                held = document_lease(None, parts.settings, run.doc_id).lock_file
                free = [i for i in waiting if document_lease(None, parts.settings, ids[i]).lock_file != held]
                for index in free[:min(rng.randint(0, 2), len(free))]:
                    waiting.remove(index)
                    first.learn(ids[index])
            return result
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(learner_module, "train", train_while_the_other_commits)
            while waiting:
                second.learn(ids[waiting.pop(0)])
        manifests = first.versions.lineage(first.versions.current())
        order = [ids.index(m["documents"][0]) for m in manifests]
        assert sorted(order) == list(range(len(ids))), seed
        assert same(serial_run(tmp_path / f"serial-{seed}", order), final_store(first, ids)), (seed, order)
        for manifest in manifests:  # the two about one subject: never one rebased over the other
            if "rebased_from" in manifest and order[manifests.index(manifest)] in (0, 3):
                other = 3 if order[manifests.index(manifest)] == 0 else 0
                assert order.index(other) > manifests.index(manifest) or \
                    manifests[order.index(other)]["version"] <= manifest["rebased_from"], (seed, order)
        rebased += sum("rebased_from" in m for m in manifests)
        again += len(trained) - len(ids)
        last_rebased += "rebased_from" in manifests[-1]
        assert saved_scores_hold(data), seed
    assert rebased and again and last_rebased, (rebased, again, last_rebased)  # every way was taken


def saved_scores_hold(data) -> bool:
    """The current version's saved probe scores (a rebased one's made from its new parent's and the candidate's) are
    those a learner that scores every probe again gets."""
    learner = Learner(settings(data), loaded=tiny_loaded())
    held = learner.held
    current = learner.versions.current()
    held.hold(current, SHARED, per_document=True)
    saved = dict(held.scores)
    suites = held.lineage_suites(current)[0]
    _, fresh = learner.parts.scorer.score({**suites, "must_keep": [], "own": []})
    return bool(saved) and all(fresh[p] == score for p, score in saved.items() if p in fresh)
