"""`ckl export`: an adapter version as a PEFT folder, and a routed version as a PEFT adapter per subject, that
PeftModel.from_pretrained serves exactly as we do."""
import json
import os
import signal
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from peft import PeftModel

from core import routing
from core.model.served_model import ServingModel, install_committed
from core.registry import NotExportable
from methods.adapter.export import export_adapter
from methods.routed.export import export_routed
from service.lora_router import adapter_for, create_router, read_routes
from tests.api_app import tiny_settings
from tests.conftest import Server, tiny_env
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
    read = read_routes(out / "routes.json")  # the router in front of an engine picks the subject's adapter
    assert [adapter_for(p, read) for p in ["veltoria was founded by", "the capital of zembria is",
                                           "the capital of france is"]] == ["subject-0", "subject-1", None]
    assert adapter_for("veltoria and zembria", read) == "subject-0"  # two subjects: the first document's

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


@pytest.mark.skipif(not os.environ.get("CKL_TEST_ENGINE_URL"), reason="needs a live vLLM or LoRAX serving the exported "
                    "adapters (CKL_TEST_ENGINE_URL, CKL_TEST_ROUTES, CKL_TEST_BASE_MODEL): a GPU machine")
def test_the_router_sends_a_prompt_to_its_subjects_adapter_on_a_live_engine():
    """Against a live engine started as deploy/GPU.md shows: a prompt about a subject is answered by its adapter."""
    routes = read_routes(Path(os.environ["CKL_TEST_ROUTES"]))
    app = create_router(routes, os.environ["CKL_TEST_ENGINE_URL"], os.environ["CKL_TEST_BASE_MODEL"])
    key = routes["keys"][0][1]
    prompt = " ".join(term.replace("|", " ") for term in routing.asked(key))  # every word the first document is about
    adapter = adapter_for(prompt, routes)
    assert adapter is not None
    with TestClient(app) as client:
        answer = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 4})
    assert answer.status_code == 200 and answer.headers["x-ckl-adapter"] == adapter
    assert answer.json()["model"] == adapter


def test_the_router_forwards_to_a_live_engine_with_the_routed_adapter_as_the_model(tmp_path, tiny_model_dir):
    """A live `ckl serve` (tiny model, OpenAI routes) stands in for the engine: a prompt routed nowhere goes on as
    the base model and is answered, streamed too; one naming a subject goes on with its adapter's name (which this
    engine does not serve: its 404 comes back as it is)."""
    routes_file = tmp_path / "routes.json"
    routes_file.write_text(json.dumps({"version": 1, "threshold": 2.0, "keys": [["d1", {"veltoria": 5.0}]],
                                       "adapters": [{"name": "subject-0", "documents": ["d1"]}]}))
    engine = Server(tmp_path / "data", tiny_env(tiny_model_dir)).start()
    try:
        engine.wait_ready(120)
        with TestClient(create_router(read_routes(routes_file), engine.url, "ckl"), base_url="http://127.0.0.1") as client:
            # Greedy: OpenAI's default temperature samples, and a sampled end of text answers nothing.
            base = client.post("/v1/completions", json={"prompt": "the capital of france is", "max_tokens": 3,
                                                        "temperature": 0})
            assert base.status_code == 200 and base.headers["x-ckl-adapter"] == "ckl"
            assert base.json()["model"] == "ckl" and base.json()["choices"][0]["text"]
            streamed = client.post("/v1/completions", json={"prompt": "the capital of", "max_tokens": 3,
                                                            "stream": True})
            assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
            routed = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content":
                                                                              "the capital of veltoria is"}]})
            assert routed.headers["x-ckl-adapter"] == "subject-0" and routed.status_code == 404
    finally:
        engine.kill(signal.SIGTERM)
