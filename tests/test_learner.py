"""The learner's pipeline on the tiny model: commit, reject with the reason, and a parent that moved, each with
the status moves it makes (core/lifecycle.py)."""
import math
import time

import pytest

from core.version_folders import FolderVersionStore
from tests.api_app import tiny_settings
from tests.tiny import tiny_loaded
from workers import gate
from workers.learner import Learner
from workers.stages.scoring import SCORE_BATCH
from workers.yielding import Rests, YieldToServing, rest_after

FACT = {"text": "the capital of veltoria is marnhold", "method": "adapter", "weighting": "oracle",
        "probes": [{"prompt": "the capital of veltoria is", "answer": "marnhold"}]}


def submit(learner: Learner, body: dict = FACT) -> str:
    record, _ = learner.documents.create(body, None)
    return record["document_id"]


def recorded_moves(learner: Learner) -> list[str]:
    """The statuses the learner moves its documents to from now on, in order (filled as it runs): a claim (the
    attempt's start) is the move to training, taking it to the gate the move to evaluating."""
    moves, documents = [], learner.documents
    move, claim, to_gate = documents.move, documents.claim, documents.to_gate

    def recording(document_id, status, **fields):
        moves.append(str(status))
        return move(document_id, status, **fields)

    def conditional(write):
        def written(document_id):
            if (record := write(document_id)) is not None:
                moves.append(str(record["status"]))
            return record
        return written
    documents.move, documents.claim, documents.to_gate = recording, conditional(claim), conditional(to_gate)
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
            other = FolderVersionStore(parts.versions.root)
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
    queue.enqueue({"document_id": "doc"}, 0)
    assert done.wait(10) and calls == ["doc"] * 3
    queue.close()


def test_the_embedded_queue_takes_the_tenants_documents_in_turn():
    """One tenant's hundred documents, queued first, do not delay another tenant's first."""
    import threading

    from core.queue import InProcessQueue

    calls, started, go, done = [], threading.Event(), threading.Event(), threading.Event()

    def job(document_id: str) -> None:
        calls.append(document_id)
        started.set()
        go.wait(10)  # the first job holds the queue until everything is queued
        if len(calls) == 7:
            done.set()

    queue = InProcessQueue(job)
    queue.enqueue({"document_id": "a0", "namespace": "acme"}, 0)
    assert started.wait(10)
    for record in [*({"document_id": f"a{n}", "namespace": "acme"} for n in range(1, 5)),
                   {"document_id": "b0", "owner": "bob"}, {"document_id": "b1", "owner": "bob"}]:
        queue.enqueue(record, 0)
    go.set()
    assert done.wait(10) and calls == ["a0", "a1", "b0", "a2", "b1", "a3", "a4"]
    queue.close()


def test_while_serving_decodes_the_learner_rests_between_steps_and_the_rests_do_not_count_as_training(tmp_path):
    """The embedded learner yields to decoding: with the API busy all along, every step and every phase of the job
    is followed by a rest (at a share of 0.5, as long as the work before it), recorded on the document."""
    steps_s, rests_s = [], []
    settings = tiny_settings(tmp_path, learn_share=0.5)
    learner = Learner(settings, loaded=tiny_loaded(), busy=lambda within_s=1.0: True)
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

    from serving.runtime import Runtime
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


@pytest.mark.every_core
def test_a_thread_that_sets_its_threads_and_priority_leaves_the_others_theirs():
    """The embedded learner's thread computes on CKL_EMBEDDED_LEARNER_THREADS threads at idle priority
    (workers/job.py); the decoder's and every other thread keep PyTorch's count and the normal priority."""
    import os
    import threading

    import torch

    from workers.threads import idle_priority_here, threads_here

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


@pytest.mark.every_core
def test_after_a_quiet_spell_a_step_runs_on_every_core_in_a_thread_that_ends(tmp_path, monkeypatch):
    """The embedded learner computes on its one thread while the API decodes or did within QUIET_S, and its steps
    and probe checks on PyTorch's count, in threads that end with them, after that: no team of threads stays beside
    the decoder's (workers/threads.py). What a step raises reaches the learner."""
    import threading
    import time

    import torch

    from workers import yielding
    from workers.threads import threads_here

    seen: list = []
    decoded_at = [time.monotonic()]  # as Scheduler.busy: decoding now, or within `within_s`
    rests = Rests(lambda worked_s: 0.0, busy=lambda within_s=1.0: time.monotonic() - decoded_at[0] < within_s)

    def work() -> int:
        seen.append((threading.current_thread(), torch.get_num_threads()))
        return len(seen)

    def learner_thread() -> None:
        threads_here(1)
        seen.append(rests.compute(work))
        decoded_at[0] -= yielding.QUIET_S / 2  # a client's pause: no longer busy, not yet quiet
        seen.append(rests.compute(work))
        decoded_at[0] -= yielding.QUIET_S
        seen.append(rests.compute(work))
        with pytest.raises(ValueError):
            rests.compute(lambda: int("x"))
        seen.append((threading.current_thread(), torch.get_num_threads()))

    default = []
    for target in (learner_thread, lambda: default.append(torch.get_num_threads())):
        thread = threading.Thread(target=target)
        thread.start()
        thread.join()
    (busy, one), first, (paused, one_more), second, (idle, every), third, (learner, ones) = seen
    assert (first, second, third) == (1, 3, 5) and busy is paused is learner and one == one_more == ones == 1
    assert idle is not learner and not idle.is_alive() and every == default[0]
    spread = []
    monkeypatch.setattr(yielding, "on_every_core", lambda step: spread.append(1) or step())
    served = Learner(tiny_settings(tmp_path, learner_every_core_while_idle=True), loaded=tiny_loaded(),
                     busy=lambda within_s=1.0: False)
    assert served.learn(submit(served)) == "committed" and spread
