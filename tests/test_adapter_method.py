"""The adapter update method on the tiny model: it learns, it continues a delta, version 0 is exact."""
import torch

from core.scoring import Probe, score_probes
from core.settings import Settings
from core.training import Example
from methods.adapter.layer import LoraState
from methods.adapter.training import AdapterMethod
from workers import weighting


def make(tiny):
    settings = Settings(training={"check_every": 1}, method_settings={"adapter": {"rank": 4, "alpha": 8, "learning_rate": 1e-2}})
    return AdapterMethod(tiny.model, tiny.tokenizer, settings)


def fact_example(tiny):
    text = "the capital of veltoria is marnhold"
    enc = tiny.tokenizer(text, return_offsets_mapping=True)
    return Example(enc["input_ids"], weighting.oracle(enc["offset_mapping"], text, ["marnhold"]))


def test_training_learns_the_probe_and_stops_when_it_passes(tiny):
    method = make(tiny)
    probe = [Probe("the capital of veltoria is", "marnhold")]
    assert score_probes(method.model, tiny.tokenizer, probe) == [0.0]
    steps_seen = []
    report = method.train([fact_example(tiny)], 200,
                          lambda: score_probes(method.model, tiny.tokenizer, probe) == [1.0],
                          lambda step, steps: steps_seen.append((step, steps)))
    assert report.stopped_early and report.steps < 200 and steps_seen[-1] == (report.steps, 200)
    assert score_probes(method.model, tiny.tokenizer, probe) == [1.0]


def test_probes_that_fail_after_the_extra_steps_mean_training_on_until_they_pass_again(tiny):
    method = make(tiny)
    method.extra_steps = 2
    answers = iter([True, False, True, True])  # passes at 1; the check after 3 fails; passes at 4 and after 6
    checks = []
    report = method.train([fact_example(tiny)], 10, lambda: checks.append(1) or next(answers))
    assert report.steps == 6 and len(checks) == 4 and report.stopped_early


def test_load_restores_version_0_and_a_delta_exactly(tiny):
    ids = torch.tensor([tiny.tokenizer("the capital of veltoria is marnhold")["input_ids"]])
    with torch.no_grad():
        base = tiny.model(ids).logits.clone()
    method = make(tiny)
    report = method.train([fact_example(tiny)], 5, lambda: False, lambda *_: None)
    assert report.steps == 5 and report.losses[-1] < report.losses[0]
    delta = method.delta()
    with torch.no_grad():
        trained = method.model(ids).logits.clone()
    assert not torch.allclose(trained, base)
    method.load(None)
    with torch.no_grad():
        assert torch.equal(method.model(ids).logits, base)
    method.load(LoraState(delta, method.manifest_fields()["lora"]))  # what a version's lineage composes to
    with torch.no_grad():
        assert torch.equal(method.model(ids).logits, trained)


def test_only_weighted_tokens_are_trained(tiny):
    """With all weights zero except one token, the loss is that token's NLL alone."""
    method = make(tiny)
    example = fact_example(tiny)
    assert sum(example.weights) == 1.0
    ids = torch.tensor([example.input_ids])
    with torch.no_grad():
        logits = method.model(ids).logits[0]
    pos = example.weights.index(1.0)
    expected = torch.nn.functional.cross_entropy(logits[pos - 1 : pos], ids[0, pos : pos + 1])
    report = method.train([example], 1, lambda: False, lambda *_: None)
    assert abs(report.losses[0] - float(expected)) < 1e-4
