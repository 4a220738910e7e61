"""The console in a real browser: Debian's Chromium driven by Playwright against a live `ckl serve` on the tiny
model (keys on). Teach a document from the page, watch it reach committed, ask the same prompt with knowledge off
and auto side by side before and after, and roll back. Screenshots of each stage are kept in
test-artifacts/console/."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from core.keys import hash_key
from core.version_folders import FolderVersionStore
from tests.conftest import ROOT, Server, in_ci, tiny_env

ARTIFACTS = ROOT / "test-artifacts" / "console"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Headless, and nothing that reaches for the network on its own (this machine's network is closed).
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PROMPT = "the capital of veltoria is"

pytestmark = pytest.mark.skipif(not CHROMIUM and not in_ci(), reason="no Chromium here (CI installs Debian's)")


@pytest.fixture
def server(tiny_model_dir, tmp_path):
    keys = [{"name": "root", "sha256": hash_key("key-root"), "scopes": ["admin"]}]
    srv = Server(tmp_path / "data", tiny_env(tiny_model_dir, CKL_API_KEYS=json.dumps(keys))).start()
    srv.wait_ready(120)
    yield srv
    srv.kill()


def answers(page) -> tuple[str, str, str]:
    """Ask both sides; their answers and the knowledge the auto side reports it used."""
    page.click("#ask-both")  # side a, then side b; each clears its answer first
    page.wait_for_selector(".side[data-side=b] .used li")
    off, auto = (page.inner_text(f".side[data-side={s}] .answer") for s in "ab")
    return off, auto, page.inner_text(".side[data-side=b] .used")


def test_teach_watch_ask_and_roll_back_in_the_console(server):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(f"{server.url}/console")
        page.fill("#key", "key-root")
        page.dispatch_event("#key", "change")
        page.wait_for_selector("#version-rows tr[data-version='0'].current")
        page.screenshot(path=ARTIFACTS / "1-versions.png", full_page=True)

        page.click("nav button[data-tab=ask]")
        page.wait_for_selector(".side[data-side=b] .who option[value=auto]", state="attached")
        page.fill("#prompt", PROMPT)
        page.select_option(".side[data-side=a] .who", "off")
        page.select_option(".side[data-side=b] .who", "auto")
        off_before, auto_before, _ = answers(page)
        assert off_before == auto_before and "marnhold" not in auto_before  # nothing learned yet: the base model

        page.click("nav button[data-tab=teach]")
        page.fill("#text", "the capital of veltoria is marnhold")
        page.click("#preview")  # without probes, this server (oracle weighting) would refuse it: the preview says why
        page.wait_for_selector("#error:text('oracle weighting needs probes')")
        page.fill(".probe .p", PROMPT)
        page.fill(".probe .a", "marnhold")
        page.click("#preview")
        page.wait_for_selector("#previewed:text('checked by your 1 probe')")
        assert page.is_hidden("#error")
        page.click("#send")
        page.wait_for_selector("#doc-status:text('committed')", timeout=120_000)
        assert page.get_attribute("#doc-progress", "value") == page.get_attribute("#doc-progress", "max")
        assert "veltoria" in page.inner_text("#doc-key") and page.inner_text("#doc-heat").strip()
        page.screenshot(path=ARTIFACTS / "2-document.png", full_page=True)

        page.click("nav button[data-tab=versions]")
        page.wait_for_selector("#version-rows tr[data-version='1'].current", timeout=30_000)
        page.click("nav button[data-tab=ask]")
        page.wait_for_selector(".side[data-side=b] .who option[value='ckl-v1']", state="attached")
        off_after, auto_after, used = answers(page)
        assert off_after == off_before and auto_after.split()[:1] == ["marnhold"]
        assert re.search(r"version 1: document [0-9a-f]{16} \(routed", used), used
        page.screenshot(path=ARTIFACTS / "3-ask.png", full_page=True)

        page.click("nav button[data-tab=versions]")
        page.click("#version-rows tr[data-version='0'] button")  # roll back
        page.wait_for_selector("#version-rows tr[data-version='0'].current")
        page.screenshot(path=ARTIFACTS / "4-rolled-back.png", full_page=True)
        browser.close()
    assert {p.name for p in Path(ARTIFACTS).iterdir()} >= {"1-versions.png", "4-rolled-back.png"}


def test_a_teach_keys_console_shows_its_own_documents_and_no_versions(tiny_model_dir, tmp_path):
    import httpx
    from playwright.sync_api import sync_playwright

    keys = [{"name": name, "sha256": hash_key(f"key-{name}"), "scopes": ["teach", "generate"]}
            for name in ("alice", "bob")]
    srv = Server(tmp_path / "data", tiny_env(tiny_model_dir, CKL_API_KEYS=json.dumps(keys))).start()
    try:
        srv.wait_ready(120)
        taught = {}
        for name in ("alice", "bob"):
            body = {"text": f"the capital of {name}land is marnhold", "probes": [
                {"prompt": f"the capital of {name}land is", "answer": "marnhold"}]}
            answer = httpx.post(f"{srv.url}/documents", json=body, headers={"Authorization": f"Bearer key-{name}"})
            assert answer.status_code == 202, answer.text
            taught[name] = answer.json()["document_id"]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page()
            page.goto(f"{srv.url}/console")
            page.fill("#key", "key-alice")
            page.dispatch_event("#key", "change")  # versions are an admin's: the console opens on the documents
            page.wait_for_selector(f"#document-rows tr[data-id='{taught['alice']}']")
            assert page.is_visible("#documents") and not page.is_visible("#versions")
            assert page.locator("#document-rows tr").count() == 1 and taught["bob"] not in page.content()
            page.screenshot(path=ARTIFACTS / "5-teach-key.png", full_page=True)
            browser.close()
    finally:
        srv.kill()


def test_the_versions_tab_pages_back_to_the_oldest_version_and_forward_again(tiny_model_dir, tmp_path):
    """More versions than one page of the history (100): the newest page first, then older pages and back."""
    import torch
    from playwright.sync_api import sync_playwright

    store = FolderVersionStore(tmp_path / "data" / "versions")
    for i in range(120):
        store.commit(store.current(), {"x": torch.zeros(1)}, {"documents": [f"d{i}"], "method": "adapter",
                                                              "probes": []}, "adapter.safetensors")
    store.activate(0)  # the server starts on version 0: the committed ones are only listed
    keys = [{"name": "root", "sha256": hash_key("key-root"), "scopes": ["admin"]}]
    srv = Server(tmp_path / "data", tiny_env(tiny_model_dir, CKL_API_KEYS=json.dumps(keys))).start()
    try:
        srv.wait_ready(120)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page()
            page.goto(f"{srv.url}/console")
            page.fill("#key", "key-root")
            page.dispatch_event("#key", "change")

            def shown(version: int) -> list[int]:
                page.wait_for_selector(f"#version-rows tr[data-version='{version}']")
                return [int(v) for v in page.locator("#version-rows tr").evaluate_all(
                    "rows => rows.map(r => r.dataset.version)")]

            assert shown(120) == list(range(21, 121)) and page.is_disabled("#newer")
            page.click("#older")
            assert shown(0) == list(range(21)) and page.is_disabled("#older")
            assert page.locator("#version-rows tr[data-version='0']").get_attribute("class") == "current"
            page.click("#newer")
            assert shown(120) == list(range(21, 121)) and page.is_disabled("#newer") and page.is_enabled("#older")
            browser.close()
    finally:
        srv.kill()
