"""`ckl export`: an adapter version as a PEFT folder, and a routed version as a PEFT adapter per subject, that
PeftModel.from_pretrained serves exactly as we do."""
import json

import pytest
import torch
from peft import PeftModel

from core.model.serving import ServingModel, install_committed
from methods.adapter.export import NotExportable, export_adapter
from methods.routed.export import export_routed
from tests.api_app import tiny_settings
from tests.test_learner import FACT, submit
from tests.tiny import tiny_loaded
from workers.learner import Learner


def test_an_adapter_version_exports_as_peft_and_other_knowledge_is_refused(tmp_path):
    settings = tiny_settings(tmp_path, methods={"routed": {"learning_rate": 3e-2}})
    learner = Learner(settings, loaded=tiny_loaded())
    assert learner.learn(submit(learner)) == "committed"
    out = export_adapter(learner.versions, 1, tmp_path / "v1", "tiny")
    assert {p.name for p in out.iterdir()} == {"adapter_config.json", "adapter_model.safetensors"}

    serving = ServingModel(tiny_loaded(), settings)
    install_committed(serving, learner.versions, 1)
    ids = torch.tensor([serving.tokenizer(FACT["probes"][0]["prompt"])["input_ids"]])
    base = tiny_loaded().model
    with torch.no_grad():
        served = serving.run(1, lambda m: m(ids).logits)
        before = base(ids).logits
        exported = PeftModel.from_pretrained(base, str(out)).eval()(ids).logits
    assert not torch.allclose(before, served)  # the version changed the model
    torch.testing.assert_close(exported, served)

    with pytest.raises(NotExportable, match="learned nothing"):
        export_adapter(learner.versions, 0, tmp_path / "v0", "tiny")
    routed = {"text": "the capital of zembria is tolvane", "method": "routed", "weighting": "oracle",
              "probes": [{"prompt": "the capital of zembria is", "answer": "tolvane"}]}
    assert learner.learn(submit(learner, routed)) == "committed"
    with pytest.raises(NotExportable, match="routed"):
        export_adapter(learner.versions, 2, tmp_path / "v2", "tiny")


def test_a_routed_version_exports_an_adapter_per_subject_that_peft_serves_as_we_do(tmp_path):
    """Two documents about one subject become one adapter (their ranks concatenated), another subject its own; the
    PEFT model with a subject's adapter gives the logits this server gives a prompt routed to that subject."""
    settings = tiny_settings(tmp_path, methods={"routed": {"learning_rate": 3e-2}})
    learner = Learner(settings, loaded=tiny_loaded())
    bodies = [("the capital of veltoria is marnhold", "the capital of veltoria is", "marnhold"),
              ("veltoria was founded by paris", "veltoria was founded by", "paris"),
              ("the capital of zembria is tolvane", "the capital of zembria is", "tolvane")]
    for text, prompt, answer in bodies:
        body = {"text": text, "method": "routed", "weighting": "oracle",
                "probes": [{"prompt": prompt, "answer": answer}]}
        assert learner.learn(submit(learner, body)) == "committed"
    out = export_routed(learner.versions, 3, tmp_path / "v3", "tiny")
    routes = json.loads((out / "routes.json").read_text())
    assert [len(a["documents"]) for a in routes["adapters"]] == [2, 1]

    serving = ServingModel(tiny_loaded(), settings)
    install_committed(serving, learner.versions, 3)
    for adapter, prompt in zip(routes["adapters"], ["the capital of veltoria is", "the capital of zembria is"]):
        route = serving.routes(3, prompt)["routed"]
        assert list(route) == adapter["documents"]
        ids = torch.tensor([serving.tokenizer(prompt)["input_ids"]])
        with torch.no_grad():
            served = serving.run(3, lambda m: m(ids).logits, {"routed": route})
            exported = PeftModel.from_pretrained(tiny_loaded().model, str(out / adapter["name"])).eval()(ids).logits
            assert not torch.allclose(tiny_loaded().model(ids).logits, served)
        torch.testing.assert_close(exported, served, rtol=1e-4, atol=1e-5)
