"""The routed method's deltas and training on the tiny model: the deltas of many documents applied at once are the
deltas merged into the weights, and each step replays the earlier facts most at risk beside all of the document's
own examples."""
import copy
import time

import torch
from safetensors.torch import load_file, save_file

from core import routing
from core.batching import batches, by_length, most_at_risk, step_batches
from core.namespaces import SHARED
from core.routing.candidate import Candidate
from core.routing.table import Table, Taught
from core.scoring import Probe, encode_probe
from core.settings import Settings
from core.training import Example
from methods.routed import storage
from methods.routed.layer import RoutedLora
from methods.routed.serving import Deltas, lora_shape
from methods.routed.training import RoutedMethod
from workers import weighting

THRESHOLD = 2.0


def with_random_deltas(method: RoutedMethod, documents: list[str]) -> None:
    """Committed documents with nonzero deltas (a fresh B is zero: the base model)."""
    for i, document_id in enumerate(documents):
        tensors = method.lora.fresh(seed=i)
        for name, tensor in tensors.items():
            if name.endswith(".B"):
                tensor.data.normal_(0, 0.05, generator=torch.Generator().manual_seed(100 + i))
            tensor.requires_grad_(False)
        method.lora.documents[document_id] = tensors


def merged_model(model: torch.nn.Module, method: RoutedMethod, documents: list[str]) -> torch.nn.Module:
    """A copy of the base model with the documents' deltas added to its weights: W + scale * B @ A."""
    merged = copy.deepcopy(model)
    modules = dict(merged.named_modules())
    for name in method.lora.modules:
        for document_id in documents:
            tensors = method.lora.documents[document_id]
            if f"{name}.B" not in tensors:  # a delta covers some layers and projections
                continue
            modules[name].weight.data += method.lora.shape.scale * tensors[f"{name}.B"] @ tensors[f"{name}.A"]
    return merged


def test_the_deltas_of_several_documents_at_once_are_those_deltas_merged_into_the_weights(tiny):
    base = copy.deepcopy(tiny.model)
    method = RoutedMethod(tiny.model, tiny.tokenizer, Settings())
    with_random_deltas(method, ["a", "b", "c"])
    ids = torch.tensor([tiny.tokenizer("the capital of veltoria is marnhold")["input_ids"]])
    with torch.no_grad():
        for active in (("a",), ("a", "b", "c"), ("c", "a")):
            method.activate(active)
            expected = merged_model(base, method, list(active))(ids).logits
            torch.testing.assert_close(tiny.model(ids).logits, expected, rtol=1e-4, atol=1e-5)
        method.activate(("a", "b", "c"))
        before = tiny.model(ids).logits
        with_random_deltas(method, ["d", "e", "b"])  # b read again with other tensors: the stacked ones follow
        torch.testing.assert_close(tiny.model(ids).logits, merged_model(base, method, ["a", "b", "c"])(ids).logits,
                                   rtol=1e-4, atol=1e-5)
        assert not torch.allclose(tiny.model(ids).logits, before)
        method.activate(None)
        assert torch.equal(tiny.model(ids).logits, base(ids).logits)


def test_the_document_in_training_is_trained_beside_the_stacked_deltas_of_the_others(tiny):
    text, probes = "the capital of veltoria is marnhold", [("the capital of veltoria is", "marnhold")]
    method = RoutedMethod(tiny.model, tiny.tokenizer, Settings(training={"check_every": 1}))
    with_random_deltas(method, ["a", "b"])
    key = routing.key_for(text, probes, THRESHOLD)
    method.lora.sources.update(a=1, b=2)  # as read from versions 1 and 2
    method.load(Deltas({"a": 1, "b": 2}))
    candidate = Candidate(Table([Taught("a", key, 1, method="routed"), Taught("b", key, 2, method="routed")]),
                          THRESHOLD)  # two earlier documents about veltoria
    candidate.start(SHARED, per_document=True)
    candidate.begin("new", "routed", text, probes)
    method.begin("new", text, probes)
    enc = tiny.tokenizer(text, return_offsets_mapping=True)
    example = Example(enc["input_ids"], weighting.oracle(enc["offset_mapping"], text, ["marnhold"]))
    frozen = {d: {k: v.clone() for k, v in method.lora.documents[d].items()} for d in ("a", "b")}
    method.activate(candidate.training_route())  # as the learner's train stage does
    report = method.train([example], 4, lambda: False)
    assert set(method.lora.active) == {"a", "b", "new"}
    assert report.steps == 4 and report.losses[-1] < report.losses[0]
    assert any(t.abs().sum() > 0 for k, t in method.lora.documents["new"].items() if k.endswith(".B"))
    for d in ("a", "b"):  # the others are not trained
        assert all(torch.equal(method.lora.documents[d][k], v) for k, v in frozen[d].items())


def test_a_shared_documents_run_routes_each_prompt_as_its_namespace_asks_it():
    """While a shared document is gated, a tenant's prompt reaches that tenant's documents and the shared ones, as
    the tenant's keys are answered, never another tenant's; what the candidate may move is told in each view."""
    prompt, probes = "the capital of veltoria is", [("the capital of veltoria is", "marnhold")]
    key = routing.key_for("the capital of veltoria is marnhold", probes, THRESHOLD)
    table = Table([Taught("ours", key, 1, "acme", "routed"), Taught("theirs", key, 2, "globex", "routed")])
    candidate = Candidate(table, THRESHOLD)
    candidate.start(SHARED, per_document=True)
    assert candidate.route(prompt, "acme") == ("ours",) and candidate.route(prompt) is None
    candidate.begin("shared", "routed", "the capital of veltoria is paris", [(prompt, "paris")])
    assert candidate.route(prompt, "acme") == ("ours", "shared")
    assert candidate.route(prompt, "globex") == ("theirs", "shared") and candidate.route(prompt) == ("shared",)
    asked = {(prompt, "acme"), (prompt, "globex"), (prompt, SHARED), ("the capital of france is", "acme")}
    assert candidate.affected_among(asked) == asked - {("the capital of france is", "acme")}
    candidate.start("acme", per_document=True)  # a tenant's own run: every prompt as that tenant is answered
    assert candidate.route(prompt, SHARED) == candidate.route(prompt, "globex") == ("ours", "shared")
    candidate.start(SHARED, per_document=False)  # a whole-version method's run may move any prompt
    assert candidate.affected_among(asked) == asked and candidate.retire(["ours"]) == []


def test_the_replayed_rows_are_those_with_the_highest_loss_first_of_equal_ones():
    assert most_at_risk([0.1, 2.0, 0.5, 2.0], 2) == [1, 3]
    assert most_at_risk([0.1, 0.2], 5) == [1, 0]
    assert most_at_risk([], 2) == []


class Recording(RoutedMethod):
    """The routed method, recording each batch it computes a loss for."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.batches: list[list[Example]] = []

    def losses(self, batch):
        self.batches.append(batch)
        return super().losses(batch)


def probe_example(tiny, prompt: str, answer: str) -> Example:
    ids, start = encode_probe(tiny.tokenizer, Probe(prompt, answer))
    return Example(ids, [0.0] * start + [1.0] * (len(ids) - start))


def test_each_step_trains_all_own_examples_and_the_replayed_fact_most_at_risk(tiny):
    method = Recording(tiny.model, tiny.tokenizer, Settings(training={"check_every": 2, "replay_rows": 1}))
    method.begin("new", "the capital of veltoria is marnhold", [("the capital of veltoria is", "marnhold")])
    method.activate(("new",))  # its route, as the learner's train stage sets it
    own = [probe_example(tiny, "the capital of veltoria is", "marnhold"), probe_example(tiny, "veltoria", "marnhold")]
    # Earlier facts: three the model answers already (its most likely token), one it does not (its least likely).
    replay = []
    for prompt, pick in (("the capital of france is", torch.argmax), ("the capital of rome is", torch.argmin),
                         ("the", torch.argmax), ("the capital", torch.argmax)):
        with torch.no_grad():
            logits = tiny.model(torch.tensor([tiny.tokenizer(prompt)["input_ids"]])).logits[0, -1]
        replay.append(probe_example(tiny, prompt, tiny.tokenizer.convert_ids_to_tokens([int(pick(logits))])[0]))
    losses = method.measured_losses(replay, 8)
    assert max(losses) == losses[1]  # the one at risk
    method.batches.clear()
    method.extra_steps = 0
    method.train(own, 3, lambda: False, replay=replay)
    trained = [b for b in method.batches if len(b) == len(own) + 1]
    measured = [b for b in method.batches if len(b) == len(replay)]
    assert len(trained) == 3 and len(measured) == 2  # the replayed rows' loss measured again at steps 0 and 2
    assert all(batch[:2] == own for batch in trained)
    assert trained[0][2] is replay[1]
    assert all(batch == replay for batch in measured)


def test_batches_hold_at_most_their_tokens_and_go_round_the_examples_in_turn():
    examples = [Example([n] * length, [1.0] * length) for n, length in enumerate([3, 3, 5, 2])]
    made = [[e.input_ids[0] for e in batch] for batch in batches(examples, 8, 4, max_tokens=6)]
    assert made == [[0, 1], [2], [3, 0], [1]]  # an example over the room still makes a batch of its own
    assert [[e.input_ids[0] for e in b] for b in batches(examples, 2, 2)] == [[0, 1], [2, 3]]
    assert [len(b) for b in batches(examples[:1], 8, 3, max_tokens=1)] == [1, 1, 1]


def test_a_long_document_trains_its_probes_in_every_step_and_stops_at_the_deadline(tiny):
    text = "the capital of veltoria is marnhold"
    method = RoutedMethod(tiny.model, tiny.tokenizer, Settings(training={"max_step_tokens": 64}))
    method.begin("long", text, [("the capital of veltoria is", "marnhold")])
    method.activate(("long",))
    ids = tiny.tokenizer(text)["input_ids"]
    probe = Example(ids, [0.0] * (len(ids) - 1) + [1.0])
    windows = [Example((ids * 10)[n:n + 40], [1.0] * 40) for n in range(5)]  # 40 tokens each
    seen: list[list[int]] = []
    original = method.losses
    method.losses = lambda batch: (seen.append([len(e.input_ids) for e in batch]), original(batch))[1]
    report = method.train([*windows, probe], budget=4, pinned=[probe])
    assert report.steps == 4 and all(sizes[0] == len(ids) and sum(sizes[1:]) <= 64 for sizes in seen[:4])
    report = method.train([*windows, probe], budget=50, pinned=[probe], deadline=time.perf_counter())
    assert report.timed_out and report.steps == 0
    # Rests between the steps (yielding to serving) move the deadline: 3 rests of 0.1 s, a deadline 0.15 s away.
    resting = lambda worked_s: (time.sleep(0.1), 0.1)[1]  # noqa: E731
    report = method.train([*windows, probe], budget=4, pinned=[probe], deadline=time.perf_counter() + 0.15,
                          rest_after_step=resting)
    assert report.steps == 4 and not report.timed_out and abs(report.rested_s - 0.3) < 1e-9


def test_a_delta_read_again_after_leaving_memory_gives_bit_identical_logits(tiny, tmp_path):
    """At most `resident` documents stay in memory; one evicted is read again from its (real) file when a route
    needs it, and the model computes exactly what it did. A bfloat16 and an int8 file are read into the model's
    float32."""
    written = RoutedMethod(tiny.model, tiny.tokenizer, Settings())
    with_random_deltas(written, ["a", "b", "c"])
    files = {d: tmp_path / f"{d}.safetensors" for d in "abc"}
    for document_id, kind in (("a", "float32"), ("b", "bfloat16"), ("c", "int8")):
        save_file(storage.pack(written.lora.documents[document_id], kind), str(files[document_id]))
    lora = RoutedLora(tiny.model, lora_shape(Settings().method_config("routed")), resident=1)
    for version, document_id in enumerate("abc", start=1):
        lora.register(document_id, version, lambda d=document_id: load_file(str(files[d])))
    ids = torch.tensor([tiny.tokenizer("the capital of veltoria is marnhold")["input_ids"]])
    with torch.no_grad():
        lora.activate(("a",))
        first = tiny.model(ids).logits
        lora.activate(("b", "c"))  # a route of two: both stay in memory while it is on
        both = tiny.model(ids).logits
        assert set(lora.documents) == {"b", "c"}
        lora.activate(("a",))
        assert set(lora.documents) == {"a"} and (lora.hits, lora.misses) == (0, 4)
        assert torch.equal(tiny.model(ids).logits, first)
        lora.activate(("b", "c"))
        assert torch.equal(tiny.model(ids).logits, both)
        assert all(t.dtype == torch.float32 for t in lora.documents["b"].values())
        lora.activate(("c",))
        assert lora.hits == 1
        lora.activate(None)


def test_a_batch_with_a_route_per_row_gives_each_row_its_own_forward(tiny):
    """Rows routed to different documents (or to none) in one forward pass: each row's logits are those of the row
    alone with its route on, and a row routed nowhere gets exactly the base model's."""
    method = RoutedMethod(tiny.model, tiny.tokenizer, Settings())
    with_random_deltas(method, ["a", "b", "c"])
    routes = [("a",), None, ("b", "c"), ("a",)]
    texts = ["the capital of veltoria is", "the capital of france is", "marnhold was founded by", "a city in italy"]
    ids = torch.tensor([tiny.tokenizer(t)["input_ids"][:5] for t in texts])
    with torch.no_grad():
        method.lora.activate_rows(routes)
        batched = tiny.model(ids).logits
        for row, route in enumerate(routes):
            method.activate(route)
            alone = tiny.model(ids[row : row + 1]).logits[0]
            torch.testing.assert_close(batched[row], alone, rtol=1e-4, atol=1e-5)
        method.activate(None)
        torch.testing.assert_close(batched[1], tiny.model(ids[1:2]).logits[0], rtol=1e-4, atol=1e-5)  # base model


def test_int8_storage_keeps_each_rank_component_within_half_a_step_and_a_quarter_of_the_bytes():
    torch.manual_seed(0)
    factors = {"m.A": torch.randn(4, 640), "m.B": torch.randn(2048, 4) * torch.tensor([1e-3, 1e-2, 1e-1, 1.0])}
    packed = storage.pack(factors, "int8")
    assert {packed[k].dtype for k in factors} == {torch.int8}
    read = storage.unpack(packed)
    for name, value in factors.items():
        axis = 1 if name.endswith(".A") else 0  # a row of A, a column of B: each component its own scale
        step = value.abs().amax(dim=axis, keepdim=True) / 127
        assert ((read[name] - value).abs() <= step / 2 + 1e-9).all()
    written = sum(t.numel() * t.element_size() for t in packed.values())
    assert written < sum(t.numel() * 4 for t in factors.values()) / 4 + 64
    assert storage.unpack(storage.pack(factors, "bfloat16"))["m.A"].dtype == torch.bfloat16


def test_a_version_made_from_a_held_ancestor_serves_as_one_composed_from_its_lineage(tmp_path, monkeypatch):
    """install_committed makes a routed version from the state of an ancestor the server holds, through the versions
    it never swapped in (committed faster than it swaps), without reading the lineage (ServedMethod.extend): it
    routes and answers as a server that composed it."""
    from core.model import served_model as serving_module
    from core.model.served_model import ServingModel, install_committed
    from tests.api_app import tiny_settings
    from tests.test_learner import FACT, submit
    from tests.tiny import tiny_loaded
    from workers.learner import Learner

    settings = tiny_settings(tmp_path)
    learner = Learner(settings, loaded=tiny_loaded())
    quessia, brellin = ({**FACT, "text": f"the capital of {country} is {city}",
                         "probes": [{"prompt": f"the capital of {country} is", "answer": city}]}
                        for country, city in (("quessia", "dorvane"), ("brellin", "ostmark")))
    for body in (FACT, quessia, brellin):
        assert learner.learn(submit(learner, {**body, "method": "routed"})) == "committed"
    grown, composed = ServingModel(tiny_loaded(), settings), ServingModel(tiny_loaded(), settings)
    install_committed(grown, learner.versions, 1)
    install_committed(composed, learner.versions, 3)
    lineages = []
    resolve = serving_module.resolve
    monkeypatch.setattr(serving_module, "resolve", lambda *args: lineages.append(args) or resolve(*args))
    install_committed(grown, learner.versions, 3)  # version 2 never swapped in
    assert lineages == []
    for prompt in ("the capital of veltoria is", "the capital of quessia is", "the capital of brellin is", "the sky is"):
        ids = torch.tensor([grown.tokenizer(prompt)["input_ids"]])
        routes = grown.routes(3, prompt)
        assert routes == composed.routes(3, prompt)
        assert torch.equal(grown.run(3, lambda m: m(ids).logits, routes),
                           composed.run(3, lambda m: m(ids).logits, routes))
    assert grown.routes(3, "the capital of quessia is")["routed"] is not None
    assert grown.routes(3, "the capital of brellin is")["routed"] is not None


def test_examples_of_different_lengths_lose_the_same_in_passes_of_similar_length(tiny):
    """A document's long window beside its short probes runs as two passes, not one padded to the longest: each
    example's loss is what one padded pass gives, in the batch's order."""
    method = RoutedMethod(tiny.model, tiny.tokenizer, Settings())
    ids = tiny.tokenizer("the capital of veltoria is marnhold")["input_ids"]
    batch = [Example((ids * 8)[:48], [1.0] * 48), Example(ids, [0.0] * (len(ids) - 1) + [1.0]),
             Example(ids[:4], [0.0, 1.0, 1.0, 1.0])]
    assert by_length([48, 8, 4]) == [[2, 1], [0]] and by_length([4, 4, 9]) == [[0, 1], [2]]
    grouped, used = method.losses(batch)
    padded, padded_used = method._padded_losses(batch)
    assert torch.equal(used, padded_used) and torch.allclose(grouped, padded, atol=1e-4)


def test_pinned_examples_past_their_share_of_a_step_come_round_in_turn():
    pinned = [Example([n] * 10, [1.0] * 10) for n in range(6)]  # 60 tokens, over three quarters of 64
    windows = [Example([9] * 30, [1.0] * 30)]
    made = step_batches(windows, pinned, 8, 3, max_tokens=64)
    assert [[e.input_ids[0] for e in batch] for batch in made] == [[0, 1, 2, 3, 9], [4, 5, 0, 1, 9], [2, 3, 4, 5, 9]]
    few = step_batches(windows, pinned[:2], 8, 2, max_tokens=64)
    assert all(batch[:2] == pinned[:2] for batch in few)  # within their share: in every step
