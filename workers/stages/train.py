"""Train: the run's method trained on the document's examples for the step budget, stopping once its own probes
pass; a retry's plan scales the budget and the learning rate."""
from __future__ import annotations

import math
import time

from core import faults
from core.scoring import Probe, score_probes
from core.settings import Settings
from core.training import Example
from workers import gate
from workers.run import Run
from workers.stages.parts import Parts


def budget(settings: Settings, examples: list[Example], has_probes: bool) -> int:
    """The steps a document may train: the most for one sent with probes (it stops once they pass), else a few per
    128 tokens of its examples (a document's made probes may hold a fact it cannot learn: they stop it early, but
    do not keep it training)."""
    if has_probes:
        return settings.training.max_steps
    tokens = sum(len(e.input_ids) for e in examples)
    return max(4, min(settings.training.max_steps, 4 * math.ceil(tokens / 128)))


STALLED_CHECKS = 2  # checks of the probes (CKL_TRAINING_CHECK_EVERY steps apart) without one more passing


def stalled(passing: list[int]) -> bool:
    """Whether a document's made probes have stopped coming: some pass, and no more than STALLED_CHECKS checks ago.
    A fact found in a text may be one it cannot teach in its budget; the others need not wait for it (the record
    names it as not learned)."""
    return len(passing) > STALLED_CHECKS and passing[-1] > 0 and passing[-1] <= passing[-1 - STALLED_CHECKS]


def train(parts: Parts, run: Run, examples: list[Example], own: list[Probe], replay: list[Example] = (),
          pinned: list[Example] = (), report_progress: bool = True, plan: gate.RetryPlan | None = None) -> None:
    """Train on `examples`, of which `pinned` (the probes') are in every step; the training's report goes on the run
    (`fields["training"]`, `timings["train_s"]`)."""
    parts.held.forget_loaded()  # from here the methods hold a candidate, not the parent
    candidate = parts.held.candidate
    if candidate.begun is not None and candidate.begun.document_id == run.doc_id:
        # Trained (and its probes checked) beside the documents it shares a subject with: a prompt about the subject
        # will have them all on. Only its own state is trained.
        run.method.activate(tuple(d for d in candidate.training_route() if candidate.method_of(d) == run.method.name))
    steps = budget(parts.settings, examples, bool(own) and not run.made_probes)
    optimizer = None
    if plan is not None:
        steps = max(1, round(steps * plan.budget_scale))
        optimizer = run.method.optimizer()
        for group in optimizer.param_groups:
            group["lr"] *= plan.learning_rate_scale
    written: list[dict] = []  # the record as the last progress wrote it

    def progress(step: int, total: int) -> None:
        if report_progress:
            written[:] = [parts.documents.update(run.doc_id, progress={"step": step, "steps": total})]
    progress(0, steps)
    faults.kill_point("training")
    clock = time.perf_counter()
    passing: list[int] = []  # how many of its probes pass, at each check

    def probes_pass() -> bool:
        passing.append(sum(s == 1.0 for s in score_probes(parts.model, parts.tokenizer, own)) if own else 0)
        return bool(own) and (passing[-1] == len(own) or (run.made_probes and stalled(passing)))

    report = run.method.train(
        examples, steps, probes_pass=probes_pass,
        progress=progress, optimizer=optimizer, replay=list(replay), pinned=pinned,
        deadline=clock + parts.settings.training.max_train_s, rest_after_step=parts.rests.step,
        compute=parts.rests.compute,
        stop=lambda: bool(written and written[0].get("withdrawing")))  # its owner's DELETE: the gate drops it
    run.timings["train_s"] = run.timings.get("train_s", 0.0) + time.perf_counter() - clock
    run.fields["training"] = {"steps": report.steps, "stopped_early": report.stopped_early,
                              "timed_out": report.timed_out, "stopped": report.stopped, "losses": report.losses,
                              "rested_s": round(report.rested_s, 2)}
