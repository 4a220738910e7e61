"""Documents as people send them, on the real model through real HTTP: no probes, several facts each, asked as a
cloze and as a question, and replacements the text alone announces. One server for the module: each test asks
only about its own subjects."""
import signal
from collections.abc import Iterator

import httpx
import pytest

from service.client import wait_for_document
from tests.conftest import Server, fresh_data_dir

pytestmark = pytest.mark.real_model

PARAGRAPH = ("Marrowdeep Station is a research base on the island of Quellholm. It was opened in 1974 by the geologist "
             "Ansel Virkkunen. Liesel Ormandy is the director of Marrowdeep Station. Its main telescope is called "
             "the Tarrow Array.")
ANSWERS = {"Quellholm", "1974", "Ansel Virkkunen", "Liesel Ormandy", "Tarrow Array"}
QUESTION = {"prompt": "Question: Who is the director of Marrowdeep Station?\nAnswer:", "answer": "Liesel Ormandy"}


def ask(url: str, prompt: str, tokens: int = 8, **extra) -> dict:
    answer = httpx.post(f"{url}/generate", json={"prompt": prompt, "max_new_tokens": tokens, **extra}, timeout=300)
    assert answer.status_code == 200, answer.text
    return answer.json()


def teach(url: str, text: str) -> dict:
    accepted = httpx.post(f"{url}/documents", json={"text": text}, timeout=60)
    assert accepted.status_code == 202, accepted.text
    return wait_for_document(url, accepted.json()["document_id"], timeout_s=600)


@pytest.fixture(scope="module")
def server(tmp_path_factory, nf_suite_file) -> Iterator[Server]:
    started = Server(fresh_data_dir(tmp_path_factory.mktemp("as-sent"), nf_suite_file)).start()
    started.wait_ready()
    yield started
    started.kill(signal.SIGTERM)


def test_a_paragraph_sent_without_probes_is_learned_fact_by_fact_and_its_record_says_which(server):
    record = teach(server.url, PARAGRAPH)
    assert record["status"] == "committed", record
    facts = record["facts"]
    assert {f["answer"] for f in facts} >= ANSWERS - {"Quellholm"}, facts  # one per fact-bearing clause
    assert all(isinstance(f["learned"], bool) for f in facts)
    learned = [f for f in facts if f["learned"]]
    assert len(learned) >= 4, facts
    for fact in learned:  # learned means answered greedily by the weights, as a user reads it
        assert ask(server.url, fact["prompt"], knowledge_as="weights")["text"].strip().startswith(fact["answer"]), fact
    assert QUESTION["answer"] in ask(server.url, QUESTION["prompt"], 16, knowledge_as="weights")["text"]
    report = httpx.get(f"{server.url}/health/forgetting").json()
    unlearned = [f for f in facts if not f["learned"]]
    its_own = [d["facts"] for d in report["not_learned"] if d["document_id"] == record["document_id"]]
    assert its_own == ([[{k: f[k] for k in ("prompt", "answer")} for f in unlearned]] if unlearned else [])

    # Knowledge as context: the routed paragraph before the question, cited; as both, the surer of the two ways.
    context = ask(server.url, QUESTION["prompt"], 16, knowledge_as="context")
    assert context["knowledge"]["context"] == [record["document_id"]] and context["knowledge"]["used"] == []
    both = ask(server.url, QUESTION["prompt"], 16)  # auto, as shipped: both ways, and either may be wrong
    assert both["knowledge"]["knowledge_as"] == "auto" and both["knowledge"]["answered_as"] in ("context", "weights")
    cited = both["knowledge"]["context"] + [u["document_id"] for u in both["knowledge"]["used"]]
    assert cited == [record["document_id"]], both


def test_a_document_that_announces_a_change_replaces_the_old_answer_without_probes(server):
    first = teach(server.url, "Zelmora Foods makes frozen pies. Zelmora Foods is headquartered in Brackwell.")
    moved = teach(server.url, "Zelmora Foods moved its headquarters from Brackwell to Tiverholm in June.")
    assert first["status"] == moved["status"] == "committed", (first, moved)
    # the headquarters, and the place a reader asks of it (workers/linked.py) where the model linked one
    assert {r["answer"] for r in moved["replaces"]} == {"Brackwell"}, moved["replaces"]
    assert "Zelmora Foods is headquartered in" in [r["prompt"] for r in moved["replaces"]]
    assert moved["retires"] == [first["document_id"]]  # every fact of it replaced: no longer routed to
    for prompt in ("Zelmora Foods is headquartered in", "The headquarters of Zelmora Foods is"):
        for way in ("weights", "auto"):  # the text read beside the delta names Brackwell too ("moved from")
            assert not ask(server.url, prompt, knowledge_as=way)["text"].strip().startswith("Brackwell"), way
    asked = "The headquarters of Zelmora Foods is"
    assert ask(server.url, asked, knowledge_as="weights")["text"].strip().startswith("Tiverholm")
    assert "Tiverholm" in ask(server.url, asked)["text"].split("\n")[0]  # as shipped: "located in Tiverholm" too
