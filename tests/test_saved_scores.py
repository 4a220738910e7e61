"""What a job scores: only what it must. The parent's scores kept across jobs, saved for a learner that starts, and
deferred where no tolerance needs them; a run asks once which prompts its candidate may move."""
import json

from tests.api_app import tiny_settings
from tests.test_learner import FACT, submit
from tests.tiny import tiny_loaded
from workers import gate
from workers.learner import Learner


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
    candidate, asked = learner.held.candidate, []
    affected_among = candidate.affected_among
    monkeypatch.setattr(candidate, "affected_among",
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
