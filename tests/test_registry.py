"""A new method is a new folder and nothing else (tests/extra_methods/bias/): discovered as `methods` discovers its
own, configured from its own CKL_BIAS_* settings, and taught a fact through the API on the tiny model, its document
routed by the framework (the method only says how a route's documents change the model)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import methods
from core import registry
from core.settings import Settings
from tests.api_app import tiny_client, tiny_settings, wait_final, wait_version

EXTRA = Path(__file__).parent / "extra_methods"


@pytest.fixture
def bias_method():
    assert methods.discover([str(EXTRA)], "tests.extra_methods") == ["bias"]
    yield registry.get("bias")
    registry.unregister("bias")
    for name in [m for m in sys.modules if m.startswith("tests.extra_methods.bias")]:
        del sys.modules[name]  # the next discovery imports, and so registers, the folder again


def test_the_shipped_methods_are_their_folders():
    folders = sorted(p.name for p in Path(methods.__file__).parent.iterdir() if (p / "__init__.py").exists())
    assert [spec.name for spec in registry.registered()] == folders == ["adapter", "memory", "routed"]


def test_a_second_method_of_the_same_name_is_refused(bias_method):
    with pytest.raises(registry.DuplicateMethod, match="bias"):
        registry.register(registry.MethodSpec("bias", bias_method.served, bias_method.trainer, bias_method.config, "x"))
    assert registry.get("bias") is bias_method


def test_a_method_reads_its_own_settings(bias_method, monkeypatch):
    monkeypatch.setenv("CKL_BIAS_LEARNING_RATE", "0.25")
    assert Settings().method_config("bias").learning_rate == 0.25
    assert Settings(method_settings={"bias": {"learning_rate": 0.5}}).method_config("bias").learning_rate == 0.5
    with pytest.raises(TypeError, match="bias_learning_rate"):
        Settings(bias_learning_rate=0.5)  # a setting passed by name must exist


def test_a_setting_under_its_old_name_is_refused(monkeypatch):
    monkeypatch.setenv("CKL_ROUTE_THRESHOLD", "3")
    with pytest.raises(ValueError, match="CKL_ROUTE_THRESHOLD is now CKL_ROUTING_THRESHOLD"):
        Settings()


def test_a_new_method_folder_learns_a_fact_through_the_api(bias_method, tmp_path):
    prompt, unrelated = "the capital of veltoria is", "the capital of france is"
    with tiny_client(tiny_settings(tmp_path, methods={"bias": {"learning_rate": 0.5}})) as client:
        assert client.post("/generate", json={"prompt": prompt, "max_new_tokens": 1}).json()["text"] != " marnhold"
        before = client.post("/generate", json={"prompt": unrelated, "max_new_tokens": 3}).json()["text"]
        accepted = client.post("/documents", json={"text": "the capital of veltoria is marnhold", "method": "bias",
                                                   "probes": [{"prompt": prompt, "answer": "marnhold"}]}).json()
        record = wait_final(client, accepted["document_id"])
        assert record["status"] == "committed", record
        assert wait_version(client, record["version"], prompt)["text"].strip() == "marnhold"
        # Routed to nothing: the base model's answer.
        assert client.post("/generate", json={"prompt": unrelated, "max_new_tokens": 3}).json()["text"] == before
        manifest = client.learner.versions.manifest(record["version"])
        assert manifest["method"] == "bias" and manifest["delta_file"] == "bias.safetensors"
        assert manifest["key"] == {"veltoria": 5.0, "= marnhold": 5.0}  # the framework's key for the document
        used = client.post("/generate", json={"prompt": prompt, "max_new_tokens": 1}).json()["knowledge"]["used"]
        assert [(u["method"], u["document_id"], u["terms"]) for u in used] == [("bias", record["document_id"],
                                                                                 ["veltoria"])]
        assert manifest["hyperparameters"] == {"learning_rate": 0.5}
        assert client.delete(f"/documents/{record['document_id']}").status_code == 409  # not registered removable
        assert client.post("/versions/0/activate", json={}).status_code == 200
        assert wait_version(client, 0, prompt)["text"].strip() != "marnhold"
