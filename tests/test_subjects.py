"""Knowledge that composes, on the tiny model: documents about one subject add up, a later document replaces an
earlier fact (detected or named), a replaced answer does not come back, and a prompt naming two subjects uses both."""
from __future__ import annotations

from tests.api_app import tiny_client, tiny_settings, wait_final, wait_version
from workers import neighbours

FAST = {"routed": {"learning_rate": 3e-2}}


def settings(tmp_path):
    """The tiny model's fast routed method, and the default learned check: no learned fact may be lost."""
    return tiny_settings(tmp_path, methods=FAST, learned_tolerance=0.0)


def teach(client, text: str, prompt: str, answer: str, **extra) -> dict:
    body = {"text": text, "method": "routed", "probes": [{"prompt": prompt, "answer": answer}], **extra}
    accepted = client.post("/documents", json=body)
    assert accepted.status_code == 202, accepted.json()
    record = wait_final(client, accepted.json()["document_id"])
    assert record["status"] == "committed", record
    return record


def answer(client, version: int, prompt: str) -> str:
    """The first word of the greedy answer once `version` is served."""
    wait_version(client, version, prompt)
    return greedy(client, prompt)


def greedy(client, prompt: str, model: str = "ckl") -> str:
    """The first word of the greedy answer."""
    body = {"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0}
    return (client.post("/v1/completions", json=body).json()["choices"][0]["text"].split() or [""])[0]


def test_documents_about_one_subject_are_all_answered_and_a_replacement_retires_exactly_the_older_fact(tmp_path):
    with tiny_client(settings(tmp_path)) as client:
        capital = teach(client, "the capital of veltoria is marnhold", "the capital of veltoria is", "marnhold")
        currency = teach(client, "the chief executive of veltoria is paris", "the chief executive of veltoria is", "paris")
        assert currency["version"] == 2
        assert answer(client, 2, "the capital of veltoria is") == "marnhold"  # the first document still answers
        assert greedy(client, "the chief executive of veltoria is") == "paris"
        manifest = client.learner.versions.manifest(2)
        assert manifest["gate"]["accepted"] and "replaces" not in manifest

        moved = teach(client, "the new capital of veltoria is berlin", "the capital of veltoria is", "berlin")
        assert moved["replaces"] == [{"prompt": "the capital of veltoria is", "answer": "marnhold",
                                      "document_id": capital["document_id"]}]
        assert moved["retires"] == [capital["document_id"]]  # all it taught is replaced: its delta is off
        assert answer(client, 3, "the capital of veltoria is") == "berlin"
        assert greedy(client, "the chief executive of veltoria is") == "paris"  # the subject's other fact stays
        old = client.get(f"/documents/{capital['document_id']}").json()
        assert [(r["answer"], r["replaced_by"], r["in_version"]) for r in old["replaced"]] == \
            [("marnhold", moved["document_id"], 3)]
        report = client.get("/health/forgetting").json()
        assert report["learned"]["probes"] == 2  # the replaced fact left the learned suite; nothing else did
        assert [r["answer"] for r in report["replaced"]] == ["marnhold"]

        # Another subject, then a rollback that keeps the replacement: the replaced answer does not come back.
        teach(client, "the capital of marnhold is rome", "the capital of marnhold is", "rome")
        assert client.post("/versions/3/activate", json={}).status_code == 200
        assert answer(client, 3, "the capital of veltoria is") == "berlin"
        assert greedy(client, "the capital of veltoria is", model="ckl-v3") == "berlin"
        serving = client.app.state.runtime.serving
        assert serving.routes(3, "the capital of veltoria is")["routed"] == (currency["document_id"], moved["document_id"])


def test_removing_a_replacement_brings_back_what_it_replaced(tmp_path):
    with tiny_client(settings(tmp_path)) as client:
        teach(client, "the capital of veltoria is marnhold", "the capital of veltoria is", "marnhold")
        moved = teach(client, "the new capital of veltoria is berlin", "the capital of veltoria is", "berlin")
        assert answer(client, 2, "the capital of veltoria is") == "berlin"
        removal = client.delete(f"/documents/{moved['document_id']}")
        assert wait_final(client, removal.json()["document_id"])["status"] == "committed"
        assert answer(client, 3, "the capital of veltoria is") == "marnhold"
        report = client.get("/health/forgetting").json()
        assert report["learned"]["probes"] == 1 and report["replaced"] == []


def test_a_document_may_name_what_it_supersedes(tmp_path):
    with tiny_client(settings(tmp_path)) as client:
        first = teach(client, "the capital of veltoria is marnhold", "the capital of veltoria is", "marnhold")
        unknown = client.post("/documents", json={"text": "veltoria has a new capital", "method": "routed",
                                                  "weighting": "uniform", "supersedes": ["0123456789abcdef"]})
        assert unknown.status_code == 422 and unknown.json()["error"]["fields"][0]["field"] == "supersedes"
        named = teach(client, "the maker of veltoria is italy", "the maker of veltoria is", "italy",
                      supersedes=[first["document_id"]])
        assert [r["answer"] for r in named["replaces"]] == ["marnhold"]
        assert client.get("/health/forgetting").json()["learned"]["probes"] == 1


def test_a_prompt_that_names_two_subjects_uses_both_deltas(tmp_path):
    with tiny_client(settings(tmp_path)) as client:
        a = teach(client, "the capital of veltoria is marnhold", "the capital of veltoria is", "marnhold")
        b = teach(client, "the capital of marnhold is rome", "the capital of marnhold is", "rome")
        wait_version(client, 2, "the capital of marnhold is")
        serving = client.app.state.runtime.serving
        assert serving.routes(2, "veltoria and marnhold")["routed"] == (a["document_id"], b["document_id"])
        assert serving.routes(2, "the capital of marnhold is")["routed"] == (b["document_id"],)
        assert greedy(client, "the capital of marnhold is") == "rome"
        assert greedy(client, "the capital of veltoria is") == "marnhold"


def continuation(client, prompt: str) -> str:
    body = {"model": "ckl", "prompt": prompt, "max_tokens": 8, "temperature": 0}
    return client.post("/v1/completions", json=body).json()["choices"][0]["text"]


def test_a_known_subject_is_routed_by_its_name_with_what_is_asked_and_its_other_prompts_run_the_base_model(tmp_path):
    with tiny_client(settings(tmp_path)) as client:
        # "Paris" is a name English uses often: no rare word routes to it; its name with "capital" does.
        before = continuation(client, "Paris is a")
        record = teach(client, "the capital of Paris is berlin", "the capital of Paris is", "berlin")
        assert client.learner.versions.manifest(1)["key"]["paris | capital"] == 2.0
        assert "neighbours" not in record  # no neighbour prompt reaches the delta: nothing of Paris's to keep
        assert answer(client, 1, "the capital of Paris is") == "berlin"
        routes = client.app.state.runtime.serving.routes
        assert routes(1, "Paris, the capital city, is")["routed"] == (record["document_id"],)
        assert routes(1, "Paris is a")["routed"] is None and continuation(client, "Paris is a") == before


def test_a_known_subjects_document_sent_without_probes_is_routed_by_what_its_opening_says(tmp_path):
    """The probes the learner makes ask what it found; a reader asks about what the text opens with ("the tower of
    Paris"), so the learned key has that too, and Paris's other prompts still run the base model."""
    with tiny_client(settings(tmp_path)) as client:
        body = {"text": "Paris made a new tower. The tower is tall.", "method": "routed", "weighting": "uniform"}
        record = wait_final(client, client.post("/documents", json=body).json()["document_id"])
        assert record["status"] == "committed", record
        assert client.learner.versions.manifest(1)["key"]["paris | tower"] == 2.0
        routes = client.app.state.runtime.serving.routes
        wait_version(client, 1, "the tower of paris is")
        assert routes(1, "the tower of paris is")["routed"] == (record["document_id"],)
        assert routes(1, "Paris is a")["routed"] is None


def test_a_method_that_moves_every_prompt_is_gated_on_a_known_subjects_neighbour_prompts(tmp_path):
    with tiny_client(tiny_settings(tmp_path, neighbour_tolerance=1.0)) as client:
        before = {t.format("Paris"): continuation(client, t.format("Paris")) for t in neighbours.TEMPLATES}
        record = teach(client, "the capital of Paris is berlin", "the capital of Paris is", "berlin", method="adapter")
        assert {n["prompt"]: n["answer"].strip() for n in record["neighbours"]} == {p: a.strip() for p, a in before.items()}
        (check,) = [c for c in record["gate"]["checks"] if c["check"] == "neighbours"]
        # The adapter moves every prompt, Paris's other ones too, and the gate sees it (the share kept in full is
        # at most the mean answer-token accuracy); the tolerance of 1 lets it commit.
        assert check["value"] <= record["scores"]["after"]["neighbours_acc"] < 1.0 and check["passed"]
        assert client.learner.versions.manifest(1)["neighbours"] == record["neighbours"]
        assert client.get("/health/forgetting").json()["neighbours"]["probes"] == len(neighbours.TEMPLATES)


def test_a_prompt_asked_again_with_the_words_news_adds_is_the_same_question():
    from core.scoring import Probe
    from core.state import LearnedFact, replaced_by

    old = LearnedFact(Probe("The chief executive of Vontarex is", "Talia Brennick"), "d1", 1)
    other = LearnedFact(Probe("The mayor of Vontarex is", "Edda Froste"), "d1", 1)
    new = [Probe("The chief executive of Vontarex is now", "Orrin Vale")]
    assert replaced_by(new, [], [old, other]) == [old]


def test_a_probe_that_contradicts_a_must_keep_probe_is_refused_at_post(tmp_path):
    with tiny_client(settings(tmp_path)) as client:
        kept = {"probes": [{"prompt": "the capital of France is", "answer": "paris"}]}
        assert client.post("/probes", json=kept).status_code == 201
        body = {"text": "the capital of France is now berlin",
                "probes": [{"prompt": "The capital of France is now", "answer": "berlin"}]}
        refused = client.post("/documents", json=body)
        assert refused.status_code == 422 and refused.json()["error"]["fields"][0]["rule"] == "contradicts_must_keep"
        assert client.get("/documents").json()["total"] == 0


def test_a_known_subjects_neighbour_prompts_leave_out_what_the_document_asks():
    probes = [("The headquarters of Siemens are now in", "Munich")]
    text = "Siemens moved. The headquarters of Siemens are now in Munich."
    assert neighbours.familiar_subjects(text, probes) == ["Siemens"]
    opening = "Lisbon has a new mayor. Tomé Varrancho promised trees."  # the made probe does not ask about Lisbon
    made = [("Tomé Varrancho promised", "trees")]
    assert neighbours.familiar_subjects(opening, made) == []
    assert neighbours.familiar_subjects(opening, made, {"lisbon | mayor": 2.0, "= trees": 1.0}) == ["Lisbon"]
    assert neighbours.familiar_subjects("The mayor of Vontarex is Edda Froste.", [("The mayor of Vontarex is",
                                                                              "Edda Froste")]) == []  # invented
    founded = "Founded by the surveyor Lidwina Osterkamp in 1889, Brannock Heavy Rail builds locomotives."
    assert neighbours.familiar_subjects(founded, [("Founded by the surveyor", "Lidwina Osterkamp")]) == []  # its place
    assert neighbours.familiar_subjects(founded, [("Brannock Heavy Rail: Founded by the surveyor", "Lidwina")]) == []
    assert "Siemens was founded" not in neighbours.neighbour_prompts(["Siemens"], ["The founder of Siemens is"])
    assert len(neighbours.neighbour_prompts(["Siemens"], [probes[0][0]])) == len(neighbours.TEMPLATES)
