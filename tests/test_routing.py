"""Routing: a document's key, a prompt's route, and the routed method on the tiny model."""
import re

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core import routing
from core.routing.table import Table, Taught
from core.subjects import names
from serving.generation import SamplingParams, generate
from tests.api_app import tiny_client, tiny_settings, wait_final, wait_version
from tests.tiny import tiny_loaded

THRESHOLD = 2.0


def test_a_key_is_the_documents_rare_words_its_answers_marked():
    key = routing.document_key("The capital of Veltoria is Marnhold, a port city.", answers=["Marnhold"])
    assert key == {"veltoria": 5.0, "= marnhold": 5.0}
    assert routing.document_key("The Drift scooter is made by Wenmark Motors.", ["Wenmark Motors"]).keys() == \
        {"drift", "scooter", "= wenmark", "= motors"}  # common words are never key words; two rarer ones can route
    assert routing.unroutable({"= marnhold": 5.0}, THRESHOLD)  # a question does not name its answer


def test_a_prompt_goes_to_every_document_it_names_or_to_none():
    keys = [("a", routing.document_key("The capital of Veltoria is Marnhold.", ["Marnhold"])),
            ("b", routing.document_key("The Drift scooter is made by Wenmark Motors.", ["Wenmark Motors"])),
            ("c", routing.document_key("Veltoria changed its flag.", []))]
    assert routing.route("Veltoria's seat of government is the city of", keys, THRESHOLD) == ("a", "c")  # one subject
    assert routing.route("The maker of the Drift scooter is", keys, THRESHOLD) == ("b",)
    assert routing.route("Is the Drift scooter sold in Veltoria?", keys, THRESHOLD) == ("a", "b", "c")  # two subjects
    assert routing.route("Snow drift closed the road", keys, THRESHOLD) is None  # one rare-ish word is not enough
    assert routing.route("The capital of France is", keys, THRESHOLD) is None
    assert routing.related(keys[2][1], keys, THRESHOLD) == ("a", "c")  # the documents a new one shares a subject with
    assert routing.related(keys[0][1], keys[:1] + [("d", routing.document_key("Marnhold has a port.", []))],
                           THRESHOLD) == ("a",)  # an answer is not what a document is about
    # A rarer word two stories share is not their subject: the documents a new one trains beside are those a prompt
    # naming what its probes ask about reaches.
    money = [(name, (f"{name} replaced its old banknotes. The currency of {name} is the {coin}.",
                     [(f"The currency of {name} is the", coin)])) for name, coin in (("Dalavold", "istereskum"),
                                                                                      ("Kavoskold", "ulvearvis"))]
    stories = [(d, routing.key_for(text, probes, THRESHOLD)) for d, (text, probes) in money]
    assert routing.related(stories[1][1], stories, THRESHOLD) == ("Dalavold", "Kavoskold")  # "banknotes" weighs 2.2
    about = routing.subject_terms(*money[1][1])
    assert about == ["kavoskold"] and routing.related(stories[1][1], stories, THRESHOLD, about) == ("Kavoskold",)
    # A subject named by one of its facts: the document reached by its answer brings its subject's others.
    assert routing.route("The flag of the country whose capital is Marnhold is", keys, THRESHOLD) == ("a", "c")
    assert routing.route("Wenmark Motors makes the", keys, THRESHOLD) == ("b",)


def test_a_known_subject_is_routed_by_its_name_and_what_is_asked_about_it():
    paris = routing.key_for("Paris held an election. The mayor of Paris is Lucien Marchetti.",
                            [("The mayor of Paris is", "Lucien Marchetti")], THRESHOLD)
    harvard = routing.key_for("The president of Harvard University is Cordelia Vashti.",
                              [("The president of Harvard University is", "Cordelia Vashti")], THRESHOLD)
    vontarex = routing.key_for("The chief executive of Vontarex is Talia Brennick.",
                               [("The chief executive of Vontarex is", "Talia Brennick")], THRESHOLD)
    keys = [("paris", paris), ("harvard", harvard), ("vontarex", vontarex)]
    assert paris == {"paris | mayor": THRESHOLD, "= lucien": 1.96, "= marchetti": 2.74}
    assert routing.route("The city hall of Paris is run by its mayor,", keys, THRESHOLD) == ("paris",)
    assert routing.route("Paris is the capital of", keys, THRESHOLD) is None  # Paris's other facts: the base model
    assert routing.route("Harvard University is led by its president,", keys, THRESHOLD) == ("harvard",)
    assert routing.route("The president of Harvard is", keys, THRESHOLD) is None  # a name: all its words
    assert routing.route("The mayor of Rome is", keys, THRESHOLD) is None
    assert routing.route("Vontarex is known for", keys, THRESHOLD) == ("vontarex",)  # an invented name suffices
    # Read as context, a subject named by its name alone reaches its documents (its relation words not asked).
    assert routing.named("Question: Who runs Paris now?\nAnswer:", keys, 3) == ("paris",)
    assert routing.named("Who leads Harvard University?", keys, 3) == ("harvard",)
    assert routing.named("The president of Harvard is", keys, 3) == ()  # a name: all its words
    assert routing.named("who runs paris now?", keys + [("paris2", paris)], 1) == ("paris2",)  # the newest `most`
    assert routing.named("Vontarex is known for", keys, 3) == ()  # an invented name is routed to by its key
    # Sent without probes: read by the known subjects its opening sentence names, asked about with that sentence's
    # words, before it is learned and once the learner has made its probes; sent with probes, by what they ask.
    opening = "Lisbon has a new mayor: Tomé Varrancho was sworn in at city hall. He promised trees."
    assert "lisbon | hall mayor sworn" in routing.reading_key(opening, [], THRESHOLD)
    assert not any("|" in term for term in routing.key_for(opening, [], THRESHOLD))
    made = [("Tomé Varrancho promised", "trees")]
    assert "lisbon | hall mayor sworn" in routing.reading_key(opening, made, THRESHOLD, probes_made=True)
    assert "lisbon | hall mayor sworn" not in routing.reading_key(opening, made, THRESHOLD)
    assert routing.refusal("Paris held an election.", [], THRESHOLD) is None  # without probes: the text's names
    apple = routing.key_for("The newest phone from Apple is called the iPhone Meridian.",
                            [("The newest phone from Apple is called the iPhone", "Meridian")], THRESHOLD)
    assert "apple | newest phone" in apple  # "iPhone" is a name, not what is asked about Apple
    assert routing.route("Apple makes the iPhone and the", [("apple", apple)], THRESHOLD) is None


def test_a_document_whose_dates_run_into_its_next_sentence_is_accepted(tmp_path):
    """A run of a date and a token glued to the next sentence's first word ("2004.Home") has no capitalised word to
    start a name at: it names nothing, and the document is read for its other names."""
    text = "The series premiered on Tuesday 5 October 2004.Home and Away actor Bec Hewitt won the series."
    assert "bec hewitt" in names(text)
    with tiny_client(tiny_settings(tmp_path)) as client:
        accepted = client.post("/documents", json={"text": text, "method": "routed", "weighting": "uniform"})
        assert accepted.status_code == 202, accepted.text


def test_a_word_capitalised_by_its_place_is_no_subject_to_route_by():
    """"Founded" opening a sentence is a participle, "Only" a common word: no known subject's term in the key, so a
    prompt about another firm's founding ("Volvo was founded in the year") is not routed to the document. The same
    word inside a sentence, and a word in capitals, are names."""
    text = "Founded by the surveyor Lidwina Osterkamp in 1889, Brannock Heavy Rail builds freight locomotives."
    made = [("Founded by the surveyor Lidwina Osterkamp in 1889, Brannock Heavy Rail builds freight", "locomotives")]
    assert names(text) == ["lidwina osterkamp", "brannock heavy rail"]
    key = routing.reading_key(text, made, THRESHOLD, probes_made=True)
    assert not [term for term in key if term.startswith("founded |")]  # a rare word of 0.5, no subject
    assert routing.route("Volvo was founded in the year", [("brannock", key)], THRESHOLD) is None
    assert names("Only 700 people live on the Isle of Querrin.") == ["isle querrin"]
    assert names("Tessendrae Physic Garden: Laid out in") == ["tessendrae physic garden"]  # a made probe, named
    assert names("The editor of Time is new. US troops left.") == ["time", "us"]


FACT = {"text": "the capital of veltoria is marnhold", "method": "routed",
        "probes": [{"prompt": "the capital of veltoria is", "answer": "marnhold"}]}


def test_a_routed_fact_is_served_only_to_its_prompts_and_its_removal_is_exact(tmp_path):
    settings = tiny_settings(tmp_path, methods={"routed": {"learning_rate": 3e-2}})
    base = tiny_loaded()
    other = torch.tensor([base.tokenizer("the capital of france is")["input_ids"]])
    with torch.no_grad():
        base_logits = base.model(other).logits
    with tiny_client(settings) as client:
        record = wait_final(client, client.post("/documents", json=FACT).json()["document_id"])
        assert record["status"] == "committed", record
        manifest = client.learner.versions.manifest(record["version"])
        assert manifest["key"] == {"veltoria": 5.0, "= marnhold": 5.0}
        assert wait_version(client, 1, "the capital of veltoria is")["text"].strip() == "marnhold"
        metrics = client.get("/metrics").text  # read from its version once, then found in memory
        assert "ckl_deltas_resident 1.0" in metrics and "ckl_delta_cache_misses_total 1.0" in metrics
        assert float(re.search(r"^ckl_delta_cache_hits_total (\S+)$", metrics, re.MULTILINE).group(1)) > 0
        # Unrouted prompts run the base model exactly.
        serving = client.app.state.runtime.serving
        assert serving.routes(1, "the capital of france is")["routed"] is None
        with torch.no_grad():
            assert torch.equal(serving.run(1, lambda m: m(other).logits), base_logits)
        removal = client.delete(f"/documents/{record['document_id']}")
        assert removal.status_code == 202
        assert wait_final(client, removal.json()["document_id"])["status"] == "committed"
        erased = client.get(f"/documents/{record['document_id']}").json()
        assert "text" not in erased and "probes" not in erased and erased["removed_in_version"] == 2
        assert wait_version(client, 2, "the capital of veltoria is")["text"].strip() != "marnhold"
        back = client.post("/versions/1/activate", json={})  # version 1 holds what was removed
        assert back.status_code == 409 and record["document_id"] in back.json()["error"]["message"]
        assert client.post("/versions/1/activate", json={"force": True}).json() == {"current": 1}


def test_the_route_is_decided_on_the_prompt_and_held_for_the_whole_answer(tmp_path):
    """On a taught model, through the API's batched decoding and the one-request loop: a prompt about the document is
    routed once, and every decoding step of its answer runs that document's delta."""
    settings = tiny_settings(tmp_path, methods={"routed": {"learning_rate": 3e-2}})
    with tiny_client(settings) as client:
        record = wait_final(client, client.post("/documents", json=FACT).json()["document_id"])
        assert record["status"] == "committed", record
        wait_version(client, 1, "the capital of veltoria is")
        serving = client.app.state.runtime.serving
        routed = serving.methods["routed"]
        decided, stepped = [], []
        routes, use, use_rows = serving.routes, routed.use, routed.use_rows
        serving.routes = lambda *args: decided.append(routes(*args)["routed"]) or routes(*args)
        routed.use = lambda version, r=None: stepped.append(r) or use(version, r)
        routed.use_rows = lambda version, rows: stepped.extend(rows) or use_rows(version, rows)
        body = client.post("/generate", json={"prompt": "the capital of veltoria is", "max_new_tokens": 6,
                                              "stop": []}).json()
        assert decided == [(record["document_id"],)], decided
        assert body["completion_tokens"] == len(stepped) == 6 and set(stepped) == {decided[0]}
        decided.clear(), stepped.clear()
        prompt_ids = serving.tokenizer("the capital of veltoria is")["input_ids"]
        generate(serving, prompt_ids, SamplingParams(max_new_tokens=5))
        assert len(decided) == 1 and stepped == decided * 5


@pytest.mark.parametrize("text,prompt,reason", [
    ("the capital of france is paris", "the capital of france is", "nothing to route"),  # nothing to route by
    ("the capital of veltoria is marnhold", "the capital is", "cannot reach"),  # the probe names no key word
])
def test_a_document_a_routed_delta_could_never_serve_is_refused_at_post(tmp_path, text, prompt, reason):
    with tiny_client(tiny_settings(tmp_path)) as client:
        refused = client.post("/documents", json={"text": text, "method": "routed",
                                                  "probes": [{"prompt": prompt, "answer": text.split()[-1]}]})
        assert refused.status_code == 422, refused.json()
        (field,) = refused.json()["error"]["fields"]
        assert field["field"] == "text" and field["rule"] == "not_learnable_by_routed"
        assert {"nothing to route": "nothing to route", "cannot reach": "do not name"}[reason] in field["message"]
        assert client.get("/documents").json()["total"] == 0  # nothing stored


@pytest.mark.parametrize("text,prompt,reason", [
    ("the capital of france is paris", "the capital of france is", "nothing to route"),  # nothing to route by
    ("the capital of veltoria is marnhold", "the capital is", "cannot reach"),  # the probe names no key word
])
def test_a_document_a_routed_delta_could_never_serve_is_refused_before_training(tmp_path, text, prompt, reason):
    from workers.learner import Learner

    learner = Learner(tiny_settings(tmp_path), loaded=tiny_loaded())
    record, _ = learner.documents.create({"text": text, "method": "routed", "weighting": "oracle",
                                          "probes": [{"prompt": prompt, "answer": text.split()[-1]}]}, None)
    assert learner.learn(record["document_id"]) == "rejected"
    record = learner.documents.get(record["document_id"])
    assert reason in record["gate"]["reason"] and record.get("training") is None
    assert learner.versions.current() == 0


WORDS = ["veltoria", "marnhold", "paris", "mayor", "harvard", "university", "president", "drift", "scooter", "the"]
terms = st.one_of(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=2).map(" ".join),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=2).map(lambda ws: routing.ANSWER + " ".join(ws)),
    st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS)).map(lambda t: f"{t[0]} | {t[1]}"))
keys_lists = st.lists(st.dictionaries(terms, st.floats(0.1, 5.0), min_size=1, max_size=4), max_size=12)


@settings(max_examples=300, deadline=None)
@given(keys_lists, st.lists(st.sampled_from(WORDS), max_size=6), st.integers(0, 3))
def test_the_index_routes_exactly_as_the_scan(keys, prompt_words, extra):
    """The inverted index (a prompt scored only against documents sharing a word with it) gives the routes, the
    related documents and the reach of a linear scan over every key, with keys added on top (a candidate)."""
    listed = [(f"d{i}", key) for i, key in enumerate(keys)]
    index = routing.KeyIndex(listed[extra:]).plus(listed[:extra])
    scan = listed[extra:] + listed[:extra]
    prompt = " ".join(prompt_words)
    assert routing.route(prompt, index, THRESHOLD) == routing.route(prompt, scan, THRESHOLD)
    assert routing.reached(set(prompt_words), index, THRESHOLD) == routing.reached(set(prompt_words), scan, THRESHOLD)
    for _, key in listed:
        assert routing.related(key, index, THRESHOLD) == routing.related(key, scan, THRESHOLD)
    named = [" ".join(prompt_words[:2]), *prompt_words[2:]]
    assert routing.about(index, named) == routing.about(scan, named)
    assert list(index) == scan and all(index.key_of(d) == key for d, key in scan)


class CountingDict(dict):
    """A dict that counts its lookups (`get`)."""
    looked_up = 0

    def get(self, key, default=None):
        CountingDict.looked_up += 1
        return super().get(key, default)


def test_a_long_prompt_is_routed_in_time_linear_in_its_words():
    """A prompt of W distinct words looks up a few index entries per word, not one per pair of its words (a
    2,048-token prompt held the GIL for seconds)."""
    letters = lambda i: "".join(chr(ord("a") + i // 26 ** k % 26) for k in range(3))  # noqa: E731  (no digits)
    keys = [(f"d{i}", {f"paris{letters(i)} | mayor": 2.0, f"veltoria{letters(i)}": 1.0}) for i in range(50)]
    index = routing.KeyIndex(keys)
    index._by_word = CountingDict(index._by_word)
    prompt_words = {f"word{letters(i)}" for i in range(2000)} | {f"paris{letters(3)}", "mayor"}
    CountingDict.looked_up = 0
    assert routing.route(" ".join(sorted(prompt_words)), index, THRESHOLD) == ("d3",)
    assert CountingDict.looked_up <= 2 * len(prompt_words) + 1


def test_a_prompt_naming_a_subject_of_many_documents_is_routed_to_the_newest_few():
    """A route's width is capped (each document on it is a delta read and applied at every decoding step)."""
    keys = [(f"d{i}", {"veltoria": 3.0}) for i in range(routing.MAX_ROUTE + 36)]
    newest = tuple(f"d{i}" for i in range(36, routing.MAX_ROUTE + 36))
    assert routing.route("Who founded Veltoria?", routing.KeyIndex(keys), THRESHOLD) == newest
    assert routing.route("Who founded Veltoria?", keys, THRESHOLD) == newest


@settings(max_examples=200, deadline=None)
@given(keys_lists, st.integers(0, 12), st.lists(st.sampled_from(["", "acme", "globex"]), max_size=12))
def test_an_index_grown_key_by_key_is_the_index_built_at_once(keys, cut, namespaces):
    """A committed document extends the learner's indexes (KeyIndex.extended, Table.extend) instead of their
    being built again, one at a time or a few at once: what they hold is what building them from all the keys
    gives, in every namespace's view."""
    listed = [(f"d{i}", key) for i, key in enumerate(keys)]
    assert vars(routing.KeyIndex(listed[:cut]).extended(listed[cut:])) == vars(routing.KeyIndex(listed))
    taught = [Taught(d, key, i + 1, (namespaces + [""] * len(listed))[i]) for i, (d, key) in enumerate(listed)]
    views = [None, frozenset({""}), frozenset({"", "acme"}), frozenset({"", "globex"})]
    grown = Table(taught[:cut])
    for at in range(cut, len(taught), 2 if cut % 2 else 1):  # one document or two at a time
        [grown.keys(view) for view in views]  # indexes built before each commit, as routing a prompt builds them
        grown.extend(taught[at:at + (2 if cut % 2 else 1)])
    built = Table(taught)
    for view in views:
        assert vars(grown.keys(view)) == vars(built.keys(view))


steps = st.lists(st.tuples(st.sampled_from(["teach", "teach", "teach", "again", "retire", "remove"]),
                           st.integers(0, 20), st.sampled_from(["", "acme"])), min_size=1, max_size=14)


@settings(max_examples=200, deadline=None)
@given(keys_lists, steps)
def test_a_version_extended_from_its_parent_holds_what_its_lineage_composes(keys, steps):
    """The serving side makes a new version from an earlier one's where it can (the table's `extended`, the routed
    method's `extend`: documents taught for the first time), from its parent or from a few versions back (a server
    that did not swap every version in); whatever the lineage did before (documents taught again, retired, removed),
    that table routes as the one composed from every manifest of the lineage, and the routed method holds the deltas
    of the documents it holds."""
    from core.routing.table import compose, extended
    from methods.routed.serving import RoutedServed

    keys = keys or [{"veltoria": 3.0}]
    manifests, taught, held, state, deltas = [], [], 0, Table(), None
    for version, (kind, pick, namespace) in enumerate(steps, start=1):
        manifest = {"version": version, "parent": version - 1, "method": "routed", "namespace": namespace,
                    "documents": [f"d{version}"], "key": keys[version % len(keys)]}
        if kind == "again" and taught:
            manifest["documents"] = [taught[pick % len(taught)]]
        elif kind == "retire" and taught:
            manifest["retires"] = [taught[pick % len(taught)]]
        elif kind == "remove" and taught:
            manifest.update(removes=taught.pop(pick % len(taught)), key={})  # final, its text erased: never again
        if not manifest.get("removes") and manifest["documents"][0] not in taught:
            taught.append(manifest["documents"][0])
        manifests.append(manifest)
        if pick % 3 and version < len(steps):  # this version is not swapped in: the next one extends past it
            continue
        state = extended(state, manifests[held:]) or compose(manifests)
        deltas = RoutedServed.extend(deltas, manifests[held:], None) or RoutedServed.compose(manifests, None)
        held = version
        composed = compose(manifests)
        assert state.documents == composed.documents
        assert deltas.stored_in == {t.document_id: t.version for t in composed.documents}
        for view in [None, frozenset({""}), frozenset({"", "acme"})]:
            assert vars(state.keys(view)) == vars(composed.keys(view))


@settings(max_examples=300, deadline=None)
@given(keys_lists, keys_lists, st.lists(st.booleans(), max_size=12), st.lists(st.sampled_from(WORDS), max_size=6))
# A prompt naming an answer ("marnhold") goes to its document and those of the same subject: a new document about
# that subject changes its route, though the prompt names none of the new document's words.
@example([{routing.ANSWER + "marnhold": 3.0, "veltoria": 3.0}], [{"veltoria": 3.0, "scooter": 1.0}], [], ["marnhold"])
def test_a_route_changes_only_for_a_prompt_that_may_reroute(keys, added, kept, prompt_words):
    """Keys taken out and added (a removal, a retirement, a candidate): a prompt whose route differs is one
    `may_reroute` names, so the gate need route no other prompt again."""
    before = [(f"d{i}", key) for i, key in enumerate(keys)]
    after = [each for each, keep in zip(before, kept + [True] * len(before)) if keep]
    after += [(f"n{i}", key) for i, key in enumerate(added)]
    index_before, index_after = routing.KeyIndex(before), routing.KeyIndex(after[:len(after) // 2]).plus(
        after[len(after) // 2:])
    watch = routing.watched(routing.changed(index_before, index_after), [index_before, index_after], THRESHOLD)
    assert watch == routing.watched(routing.changed(before, after), [before, after], THRESHOLD)
    prompt = " ".join(prompt_words)
    if routing.route(prompt, index_before, THRESHOLD) != routing.route(prompt, index_after, THRESHOLD):
        assert routing.may_reroute(set(prompt_words), watch, index_before, THRESHOLD)
        assert routing.may_reroute(set(prompt_words), watch, index_after, THRESHOLD)
