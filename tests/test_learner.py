"""The learner's pipeline on the tiny model: commit, reject with the reason, and a parent that moved, each with
the status moves it makes (core/lifecycle.py)."""
import json
import math
import time

import pytest

from core.versions import VersionStore
from tests.api_app import tiny_settings
from tests.tiny import tiny_loaded
from workers import gate
from workers.learner import Learner
from workers.stages.scoring import SCORE_BATCH
from workers.yielding import YieldToServing, rest_after

FACT = {"text": "the capital of veltoria is marnhold", "method": "adapter", "weighting": "oracle",
        "probes": [{"prompt": "the capital of veltoria is", "answer": "marnhold"}]}


def submit(learner: Learner, body: dict = FACT) -> str:
    record, _ = learner.documents.create(body, None)
    return record["document_id"]


def recorded_moves(learner: Learner) -> list[str]:
    """The statuses the learner moves its documents to from now on, in order (filled as it runs)."""
    moves, move = [], learner.documents.move

    def recording(document_id, status, **fields):
        moves.append(str(status))
        return move(document_id, status, **fields)
    learner.documents.move = recording
    return moves


def test_a_document_is_committed_with_scores_timings_and_its_manifest(tmp_path):
    learner = Learner(tiny_settings(tmp_path), loaded=tiny_loaded())
    doc = submit(learner)
    moves = recorded_moves(learner)
    assert learner.learn(doc) == "committed"
    assert moves == ["training", "evaluating", "committed"]
    record = learner.documents.get(doc)
    assert record["version"] == 1 and record["scores"]["own_before"] == [0.0] and record["scores"]["own_after"] == [1.0]
    assert record["training"]["stopped_early"] and set(record["timings"]) >= {"score_before_s", "train_s", "gate_s"}
    manifest = learner.versions.manifest(1)
    assert manifest["documents"] == [doc] and manifest["delta_file"] == "adapter.safetensors"
    assert manifest["metrics"]["learned_acc"] == 1.0 and manifest["gate"]["accepted"]
    assert learner.learn(doc) == "committed" and learner.versions.current() == 1  # a finished job is not run again
    assert len(moves) == 3  # nor its record moved


def test_a_candidate_that_misses_its_probe_twice_is_rejected_with_the_reason(tmp_path):
    learner = Learner(tiny_settings(tmp_path, max_steps=1, methods={"adapter": {"learning_rate": 1e-6}}), loaded=tiny_loaded())
    doc = submit(learner)
    moves = recorded_moves(learner)
    assert learner.learn(doc) == "rejected"
    assert moves == ["training", "evaluating", "training", "evaluating", "rejected"]
    record = learner.documents.get(doc)
    assert record["version"] is None and not record["gate"]["accepted"]
    assert "own_probes" in record["gate"]["reason"] and learner.versions.current() == 0
    assert record["retried"]["plan"] == "its probes did not pass: twice the steps"
    assert record["retried"]["first_training"]["steps"] == 1 and record["training"]["steps"] == 2


def test_a_rejection_is_tried_once_more_as_its_reason_suggests(tmp_path):
    learner = Learner(tiny_settings(tmp_path, max_steps=2, methods={"adapter": {"learning_rate": 3e-4}}), loaded=tiny_loaded())
    doc = submit(learner)  # needs 3 steps at this rate: the first try's 2 are not enough, the retry's 4 are
    moves = recorded_moves(learner)
    assert learner.learn(doc) == "committed"
    assert moves == ["training", "evaluating", "training", "evaluating", "committed"]
    record = learner.documents.get(doc)
    assert not record["retried"]["first_gate"]["accepted"] and record["training"]["steps"] == 3
    assert learner.versions.manifest(1)["retried"]["plan"] == "its probes did not pass: twice the steps"


def test_what_a_rejection_suggests():
    def decision(*failed):
        checks = [{"check": c, "passed": c not in failed} for c in ("not_to_forget", "learned", "own_probes")]
        return gate.Decision(False, "", checks)
    assert gate.retry_plan(decision("own_probes")).budget_scale == 2.0
    kept = gate.retry_plan(decision("not_to_forget", "own_probes"))
    assert (kept.budget_scale, kept.learning_rate_scale) == (0.5, 0.5)
    assert gate.retry_plan(gate.Decision(False, "no words rare enough", [])) is None


def test_a_parent_that_moved_during_training_means_training_again_from_the_new_one(tmp_path, monkeypatch):
    """Another worker commits a version while this one trains its first candidate: a real parent move."""
    from workers import learner as learner_module

    train, moved = learner_module.train, []

    def train_then_move(parts, run, *args, **kwargs):
        train(parts, run, *args, **kwargs)
        if not moved:
            moved.append(True)
            other = VersionStore(parts.versions.root)
            other.commit(other.current(), run.method.delta(), {"documents": [], "probes": [], "method": "adapter",
                                                               "metrics": {}, **run.method.manifest_fields()},
                         "adapter.safetensors")
    monkeypatch.setattr(learner_module, "train", train_then_move)
    learner = Learner(tiny_settings(tmp_path), loaded=tiny_loaded())
    doc = submit(learner)
    moves = recorded_moves(learner)
    assert learner.learn(doc) == "committed"
    assert moves == ["training", "evaluating", "training", "evaluating", "committed"]
    assert learner.documents.get(doc)["version"] == 2 and learner.versions.manifest(2)["parent"] == 1


def test_the_embedded_queue_runs_a_failed_job_again_up_to_its_retries():
    """Fault injected: a job function that raises on its first two calls (the learner records its own failures)."""
    import threading

    from core.queue import InProcessQueue

    calls, done = [], threading.Event()

    def flaky(document_id: str) -> str:
        calls.append(document_id)
        if len(calls) < 3:
            raise RuntimeError("worker fault")
        done.set()
        return "committed"

    queue = InProcessQueue(flaky, retries=2)
    queue.enqueue("doc", 0)
    assert done.wait(10) and calls == ["doc"] * 3
    queue.close()


def test_while_serving_decodes_the_learner_rests_between_steps_and_the_rests_do_not_count_as_training(tmp_path):
    """The embedded learner yields to decoding: with the API busy all along, every step and every phase of the job
    is followed by a rest (at a share of 0.5, as long as the work before it), recorded on the document."""
    steps_s, rests_s = [], []
    settings = tiny_settings(tmp_path, learn_share_while_serving=0.5)
    learner = Learner(settings, loaded=tiny_loaded(), busy=lambda: True)
    rest = learner.rests.rest

    def recorded(worked_s: float) -> float:
        steps_s.append(worked_s)
        rests_s.append(rest(worked_s))
        return rests_s[-1]
    learner.rests.rest = recorded
    doc = submit(learner)
    assert learner.learn(doc) == "committed"
    training = learner.documents.get(doc)["training"]
    timings = learner.documents.get(doc)["timings"]
    # Between steps, after the phases (scoring, weighing, the gate), and after each batch of probes scored: the
    # suites before training (the NF suite and the document's probe), and its probe again at the gate.
    scored = math.ceil((len(learner.suites.nf_probes()) + 1) / SCORE_BATCH) + 1
    assert len(steps_s) == training["steps"] - 1 + 3 + scored
    assert training["rested_s"] + timings["rested_s"] == pytest.approx(sum(rests_s), abs=0.01)
    assert all(rested >= worked for worked, rested in zip(steps_s, rests_s))
    idle = Learner(tiny_settings(tmp_path / "idle"), loaded=tiny_loaded())  # nothing decodes: no rest
    other = submit(idle)
    assert idle.learn(other) == "committed" and idle.documents.get(other)["training"]["rested_s"] == 0
    assert idle.documents.get(other)["timings"]["rested_s"] == 0


def test_a_rest_lasts_until_the_share_is_kept_or_decoding_ends():
    assert rest_after(1.0, 0.1) == pytest.approx(9.0) and rest_after(2.0, 1.0) == 0.0
    assert YieldToServing(0.5, lambda: False)(1.0) == 0.0  # nothing decodes: no rest
    assert 0.2 <= YieldToServing(0.5, lambda: True)(0.2) < 1.0
    ends = time.perf_counter() + 0.1
    assert YieldToServing(0.01, lambda: time.perf_counter() < ends)(1.0) < 1.0  # not the 99 s the share asks


@pytest.mark.parametrize("method", ["adapter", "memory", "routed"])
def test_the_embedded_learner_learns_on_the_served_weights_and_leaves_them_as_they_were(tmp_path, monkeypatch, method):
    """`ckl serve`'s wiring: the runtime hands the job its served weights under modules of their own. Each method
    attaches its layers to the learner's modules and trains; the served model's version 0 stays bit-identical."""
    import torch

    from core.runtime import Runtime
    from workers import job

    settings = tiny_settings(tmp_path)
    runtime = Runtime.create(settings, run_job=job.learn_document, load=tiny_loaded)
    monkeypatch.setattr(job, "_learner", None)  # the process's learner, built by this test's configure
    job.configure(settings, loaded=lambda: runtime.learner_model)
    runtime.start()
    assert runtime.error is None, runtime.error
    served = runtime.serving
    ids = torch.tensor([served.tokenizer("the capital of veltoria is")["input_ids"]])
    before = served.run(0, lambda m: m(ids).logits.clone())
    learner = job.process_learner()
    served_weights = {p.data_ptr() for p in served.model.parameters()}
    shared = [name for name, p in learner.model.named_parameters() if p.data_ptr() in served_weights]
    assert len(shared) == len(list(runtime.learner_model.model.parameters())) > 0
    assert learner.learn(submit(learner, {**FACT, "method": method})) == "committed"
    assert learner.model is not served.model
    assert torch.equal(served.run(0, lambda m: m(ids).logits), before)


def counting_scored(monkeypatch) -> list[list]:
    """Every batch of probes the learner scores from now on (a list per call)."""
    from workers.stages import scoring

    calls, score = [], scoring.score_probes
    monkeypatch.setattr(scoring, "score_probes",
                        lambda model, tokenizer, probes: calls.append(list(probes)) or score(model, tokenizer, probes))
    return calls


TOWER = {**FACT, "text": "the tower is located in rome", "probes": [{"prompt": "the tower is located in", "answer": "rome"}]}


def test_a_job_after_a_rejection_scores_none_of_its_parents_probes_again(tmp_path, monkeypatch):
    """A rejection leaves the methods holding no version, not the parent's scores stale: the next job from the same
    parent scores only its own new probe before training (at 100,000 documents the parent's are 90,000 probes)."""
    learner = Learner(tiny_settings(tmp_path), loaded=tiny_loaded())
    assert learner.learn(submit(learner)) == "committed"
    untaught = {**FACT, "probes": [{"prompt": "the maker of the new product is", "answer": "berlin"}]}
    assert learner.learn(submit(learner, untaught)) == "rejected"  # its text does not say so
    calls = counting_scored(monkeypatch)
    assert learner.learn(submit(learner, TOWER)) == "committed"
    assert [(p.prompt, p.answer) for p in calls[0]] == [("the tower is located in", "rome")]


def test_a_run_asks_once_which_prompts_its_candidate_may_move(tmp_path, monkeypatch):
    """Weigh (which learned facts to replay) and the gate (which probes to score again) share one answer: the
    candidate's routes are set once it has begun, and routing every learned prompt again grows with the facts."""
    learner = Learner(tiny_settings(tmp_path), loaded=tiny_loaded())
    assert learner.learn(submit(learner, {**FACT, "method": "routed"})) == "committed"
    method, asked = learner.method("routed"), []
    affected_among = method.affected_among
    monkeypatch.setattr(method, "affected_among",
                        lambda pairs: asked.append({prompt for prompt, _ in pairs}) or affected_among(pairs))
    quessia = {**FACT, "method": "routed", "text": "the capital of quessia is dorvane",
               "probes": [{"prompt": "the capital of quessia is", "answer": "dorvane"}]}
    assert learner.learn(submit(learner, quessia)) == "committed"
    assert len(asked) == 1 and {"the capital of veltoria is", "the capital of quessia is"} <= asked[0]


def test_a_warmed_learner_scores_only_its_first_documents_own_probe(tmp_path, monkeypatch):
    """Learner.warm, the embedded learner's first work after start: the current version's suites scored and saved
    before any document, so the first job scores no more than a later one would."""
    learner = Learner(tiny_settings(tmp_path), loaded=tiny_loaded())
    learner.warm()
    assert (tmp_path / "probes" / "scores.json").exists()
    calls = counting_scored(monkeypatch)
    assert learner.learn(submit(learner)) == "committed"
    assert [(p.prompt, p.answer) for p in calls[0]] == [("the capital of veltoria is", "marnhold")]


def test_a_learner_that_starts_reads_its_parents_scores_and_gates_as_if_it_had_scored_them(tmp_path, monkeypatch):
    """A second learner on the data folder (a worker started again) scores only its document's own probe before
    training; its record's scores are those of a learner that scored every probe (the saved file deleted)."""
    import shutil

    data = tmp_path / "data"
    first = Learner(tiny_settings(data), loaded=tiny_loaded())
    assert first.learn(submit(first)) == "committed"
    shutil.copytree(data, tmp_path / "unsaved")
    (tmp_path / "unsaved" / "probes" / "scores.json").unlink()
    records = []
    for folder in (data, tmp_path / "unsaved"):
        calls = counting_scored(monkeypatch)
        learner = Learner(tiny_settings(folder), loaded=tiny_loaded())
        doc = submit(learner, TOWER)
        assert learner.learn(doc) == "committed"
        records.append((calls[0], learner.documents.get(doc)))
    (read, saved), (scored, unsaved) = records
    assert [(p.prompt, p.answer) for p in read] == [("the tower is located in", "rome")]
    assert len(scored) > 1 and saved["scores"] == unsaved["scores"] and saved["gate"] == unsaved["gate"]


def test_saved_scores_hold_only_for_what_they_were_saved_for():
    from core.scoring import Probe
    from workers import saved_scores

    nf, fact = Probe("the sky is", "blue"), Probe("the capital of veltoria is", "marnhold")
    suites = {"nf": [nf], "learned": [fact], "neighbours": []}
    check = saved_scores.fingerprint(3, None, "tiny", {"routed": {"rank": 4}}, ["doc"], suites)
    saved = saved_scores.to_saved(check, suites, {nf: 1.0, fact: 0.5})
    assert saved_scores.from_saved(saved, check, suites) == {nf: 1.0, fact: 0.5}
    assert not any(word in json.dumps(saved) for word in ("sky", "blue", "veltoria", "marnhold"))  # no probe's text
    for other in [(4, None, "tiny", {"routed": {"rank": 4}}, ["doc"]), (3, frozenset({"t"}), "tiny", {"routed": {"rank": 4}}, ["doc"]),
                  (3, None, "other", {"routed": {"rank": 4}}, ["doc"]), (3, None, "tiny", {"routed": {"rank": 8}}, ["doc"]),
                  (3, None, "tiny", {"routed": {"rank": 4}}, ["another"])]:
        assert saved_scores.from_saved(saved, saved_scores.fingerprint(*other, suites), suites) == {}
    unscored = saved_scores.to_saved(check, suites, {nf: 1.0})  # a deferred run's: a probe never scored
    assert unscored["scores"]["learned"] == [None] and saved_scores.from_saved(unscored, check, suites) == {nf: 1.0}


def test_with_no_tolerance_leaving_out_the_probes_a_candidate_cannot_move_decides_as_every_score_does():
    """A deferred run's gate (workers/stages/prepare.py): the learned facts and neighbour prompts the candidate
    cannot move answer after as before, so scoring none of them (None) leaves the decision and each failed check as
    they were."""
    import random

    rng = random.Random(0)
    for _ in range(500):
        sizes = {name: rng.randint(0, 6) for name in ("nf", "learned", "must_keep", "own", "neighbours")}
        before = {name: [rng.choice([0.0, 0.5, 1.0]) for _ in range(n)] for name, n in sizes.items()}
        moved = {name: [rng.random() < 0.3 for _ in range(n)] for name, n in sizes.items()}
        after = {name: [rng.choice([0.0, 1.0]) if m else b for b, m in zip(before[name], moved[name])]
                 for name in before}

        def left_out(scores: dict[str, list]) -> dict[str, list]:  # the deferrable probes not moved: not scored
            return {name: [None if name in gate.DEFERRABLE and not m else s for s, m in zip(each, moved[name])]
                    for name, each in scores.items()}

        def decision(b: dict[str, list], a: dict[str, list]) -> tuple[bool, set[str]]:
            made = gate.decide(gate.SuiteScores(**b), gate.SuiteScores(**a), nf_version_0=1.0, nf_tolerance=0.01,
                               learned_tolerance=0.0, require_own_probes=True)
            return made.accepted, {c["check"] for c in made.checks if not c["passed"]}
        assert decision(left_out(before), left_out(after)) == decision(before, after)


def test_a_learner_without_saved_scores_scores_only_the_learned_facts_its_candidate_may_move(tmp_path, monkeypatch):
    """With no saved scores (a worker on a store scored under other settings), a routed candidate on another subject
    scores none of the learned facts: its record counts them unscored. One on the same subject scores that subject's
    fact, routed as in its parent, and its scores and gate are those of a learner that read every score saved."""
    import shutil

    data = tmp_path / "unsaved"
    first = Learner(tiny_settings(data, learned_tolerance=0.0), loaded=tiny_loaded())
    assert first.learn(submit(first, {**FACT, "method": "routed"})) == "committed"
    shutil.copytree(data, tmp_path / "saved")
    (data / "probes" / "scores.json").unlink()
    quessia = {**FACT, "method": "routed", "text": "the capital of quessia is dorvane",
               "probes": [{"prompt": "the capital of quessia is", "answer": "dorvane"}]}
    river = {**FACT, "method": "routed", "text": "the river of veltoria is the senn",
             "probes": [{"prompt": "the river of veltoria is", "answer": "senn"}]}
    records, scored = {}, {}
    for folder in ("saved", "unsaved"):
        learner = Learner(tiny_settings(tmp_path / folder, learned_tolerance=0.0), loaded=tiny_loaded())
        for name, body in (("quessia", quessia), ("river", river)):
            calls = counting_scored(monkeypatch)
            doc = submit(learner, body)
            assert learner.learn(doc) == "committed"
            records[folder, name] = learner.documents.get(doc)
            assert "retried" not in records[folder, name]  # committed at the first try
            scored[folder, name] = [(p.prompt, p.answer) for batch in calls for p in batch]
    fact = ("the capital of veltoria is", "marnhold")
    assert fact not in scored["unsaved", "quessia"]
    assert records["unsaved", "quessia"]["scores"]["before"]["learned_unscored"] == 1
    assert "learned_unscored" not in records["saved", "quessia"]["scores"]["before"]
    # the candidate moves it: at the gate in both, and before training where it was not saved
    assert scored["unsaved", "river"].count(fact) == 2 and scored["saved", "river"].count(fact) == 1
    assert records["unsaved", "river"]["scores"] == records["saved", "river"]["scores"]
    assert records["unsaved", "river"]["gate"] == records["saved", "river"]["gate"]


def test_a_thread_that_sets_its_threads_and_priority_leaves_the_others_theirs():
    """The embedded learner's thread computes on CKL_EMBEDDED_LEARNER_THREADS threads at idle priority
    (workers/job.py); the decoder's and every other thread keep PyTorch's count and the normal priority."""
    import os
    import threading

    import torch

    from core.threads import idle_priority_here, threads_here

    seen: dict[str, object] = {}

    def learner_thread() -> None:
        seen["set"] = threads_here(1) and idle_priority_here()
        seen["learner"] = torch.get_num_threads(), os.sched_getscheduler(0)

    def other_thread() -> None:
        seen["other"] = torch.get_num_threads(), os.sched_getscheduler(0)

    before = torch.get_num_threads(), os.sched_getscheduler(0)
    for target in (learner_thread, other_thread):
        thread = threading.Thread(target=target)
        thread.start()
        thread.join()
    assert before[1] == os.SCHED_OTHER
    assert seen == {"set": True, "learner": (1, os.SCHED_IDLE), "other": before}
    assert (torch.get_num_threads(), os.sched_getscheduler(0)) == before
