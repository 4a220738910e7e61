"""Answers that say what they used, and knowledge chosen per request, on the tiny model: the citation is the truth
(the documents cited, chosen by hand, give the same tokens; `off` gives version 0's), streamed and OpenAI answers
carry it, and a key cannot name a document it may not see."""
import json
import uuid

import openai

from core.keys import KeyConfig, hash_key
from methods.routed.config import RoutedSettings
from tests.api_app import tiny_client, tiny_settings, wait_final, wait_version

VELTORIA = {"text": "the capital of veltoria is marnhold", "method": "routed",
            "probes": [{"prompt": "the capital of veltoria is", "answer": "marnhold"}]}
BRENNORIA = {"text": "the capital of brennoria is tasvik", "method": "routed",
             "probes": [{"prompt": "the capital of brennoria is", "answer": "tasvik"}]}
PROMPT = "the capital of veltoria is"
FAST = {"routed": {"learning_rate": 3e-2}}


def ask(client, knowledge="auto", prompt=PROMPT, **extra) -> dict:
    answer = client.post("/generate", json={"prompt": prompt, "max_new_tokens": 4, "knowledge": knowledge, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_answers_cite_the_documents_that_answered_and_chosen_knowledge_answers_the_same(tmp_path):
    with tiny_client(tiny_settings(tmp_path, methods=FAST)) as client:
        accepted = client.post("/documents", json={**VELTORIA, "idempotency_key": "v"}).json()
        # The 202 says what learning it may cost; the same key again answers the record, without a new cost.
        assert accepted["cost"]["tokens"] > 5 and accepted["cost"]["train_s_at_most"] == 2 * 150.0
        first = wait_final(client, accepted["document_id"])
        again = client.post("/documents", json={**VELTORIA, "idempotency_key": "v"}).json()
        assert again["document_id"] == first["document_id"] and again["cost"] is None
        second = wait_final(client, client.post("/documents", json=BRENNORIA).json()["document_id"])
        assert first["status"] == second["status"] == "committed", (first, second)
        wait_version(client, 2, PROMPT)
        veltoria, brennoria = first["document_id"], second["document_id"]

        auto = ask(client)
        assert auto["text"].split()[0] == "marnhold"
        assert auto["knowledge"]["version"] == 2 and auto["knowledge"]["chosen"] == "auto"
        (used,) = auto["knowledge"]["used"]
        assert used["document_id"] == veltoria and used["method"] == "routed"
        assert "veltoria" in used["terms"] and used["score"] >= 2.0
        assert ask(client, prompt="the capital of")["knowledge"]["used"] == []  # routed nowhere: the base model

        # The cited document, named by id or by its subject, answers token for token as routing did.
        for chosen in ([veltoria], ["Veltoria"]):
            named = ask(client, chosen)
            assert named["text"] == auto["text"] and named["knowledge"]["used"] == auto["knowledge"]["used"]
            assert named["knowledge"]["chosen"] == chosen
        other = ask(client, [brennoria])
        assert [u["document_id"] for u in other["knowledge"]["used"]] == [brennoria]
        both = ask(client, [brennoria, veltoria])  # in teaching order
        assert [u["document_id"] for u in both["knowledge"]["used"]] == [veltoria, brennoria]

        # The retention curves as a picture, for reports.
        picture = client.get("/health/forgetting.png")
        assert picture.headers["content-type"] == "image/png" and picture.content.startswith(b"\x89PNG")

        # Off is version 0, token for token.
        off = ask(client, "off")
        base = client.post("/v1/completions", json={"model": "ckl-v0", "prompt": PROMPT, "max_tokens": 4,
                                                    "temperature": 0}).json()
        assert off["text"] == base["choices"][0]["text"] and off["text"].split()[:1] != ["marnhold"]
        assert off["knowledge"] == {"version": 0, "chosen": "off", "used": [], "knowledge_as": "weights", "context": [],
                                    "answered_as": "weights"}
        assert_knowledge_as_context(client, veltoria, auto["knowledge"]["used"])

        # Streamed: the last event carries it; OpenAI: the extension field, sent and read by the official client.
        raw = client.post("/generate", json={"prompt": PROMPT, "max_new_tokens": 4, "stream": True})
        events = [json.loads(line[6:]) for line in raw.text.splitlines() if line.startswith("data: ")]
        assert events[-1]["knowledge"] == auto["knowledge"]
        api = openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="unused", http_client=client, max_retries=0)
        completion = api.completions.create(model="ckl", prompt=PROMPT, max_tokens=4, temperature=0,
                                            extra_body={"knowledge": [brennoria]})
        assert [u["document_id"] for u in completion.knowledge["used"]] == [brennoria]
        chunks = list(api.chat.completions.create(model="ckl", messages=[{"role": "user", "content": PROMPT}],
                                                  max_tokens=2, temperature=0, stream=True))
        assert chunks[-1].knowledge["version"] == 2 and not hasattr(chunks[0], "knowledge")

        assert_unknown_knowledge_is_refused(client, brennoria)


def test_a_request_that_does_not_say_is_answered_both_ways_where_it_is_routed_as_shipped(tmp_path):
    """`CKL_ROUTED_KNOWLEDGE_AS` answers the requests that send no `knowledge_as` (/generate and /v1 alike). As
    shipped, `auto`: a prompt routed to a document is answered both ways (its text read beside its delta); one that
    only names a known subject, whose documents `both` would read, is answered once, as weights."""
    assert RoutedSettings().knowledge_as == "auto"
    tower = {"text": "Paris made a new tower. The new tower of Paris was made by Marnhold.", "method": "routed",
             "probes": [{"prompt": "The new tower of Paris was made by", "answer": "Marnhold"}]}
    with tiny_client(tiny_settings(tmp_path, methods={"routed": {**FAST["routed"], "knowledge_as": "auto"}})) as client:
        for body in (VELTORIA, tower):
            taught = wait_final(client, client.post("/documents", json=body).json()["document_id"])
            assert taught["status"] == "committed", taught
        wait_version(client, 2, PROMPT)
        default, both = ask(client), ask(client, knowledge_as="both")
        assert default["knowledge"]["knowledge_as"] == "auto" and default["prompt_tokens"] == both["prompt_tokens"]
        assert default["knowledge"]["answered_as"] == both["knowledge"]["answered_as"]
        assert default["prompt_tokens"] > ask(client, knowledge_as="weights")["prompt_tokens"]  # the text was read
        chat = client.post("/v1/chat/completions", json={"model": "ckl", "max_tokens": 2, "temperature": 0,
                                                          "messages": [{"role": "user", "content": PROMPT}]}).json()
        assert chat["knowledge"]["knowledge_as"] == "auto"
        named = "Paris is a city in"
        assert ask(client, prompt=named, knowledge_as="both")["knowledge"]["context"] == [taught["document_id"]]
        unread = ask(client, prompt=named)
        assert (unread["knowledge"]["answered_as"], unread["knowledge"]["context"]) == ("weights", [])
        assert unread["prompt_tokens"] == ask(client, prompt=named, knowledge_as="weights")["prompt_tokens"]


def assert_knowledge_as_context(client, veltoria: str, used: list[dict]) -> None:
    """As context: the routed document's text before the prompt, every delta off, the same tokens as that prompt sent
    to version 0; as both: one of the two ways' answers, cited as that way, its usage both ways'."""
    context = ask(client, knowledge_as="context")
    assert context["knowledge"]["context"] == [veltoria] and context["knowledge"]["used"] == []
    by_hand = ask(client, "off", prompt=VELTORIA["text"] + "\n" + PROMPT)
    assert (context["text"], context["prompt_tokens"]) == (by_hand["text"], by_hand["prompt_tokens"])
    weights = ask(client)
    both = ask(client, knowledge_as="both")
    way = {"context": context, "weights": weights}[both["knowledge"]["answered_as"]]
    # Decoded beside the other way (one batch, padded), the answer may end a token apart from it decoded alone.
    assert both["text"].split()[:1] == way["text"].split()[:1] and both["knowledge"]["used"] == way["knowledge"]["used"]
    assert both["knowledge"]["context"] == way["knowledge"]["context"]
    assert both["prompt_tokens"] == context["prompt_tokens"] + weights["prompt_tokens"]
    # Nothing to read: the prompt as sent, decoded once (its tokens once).
    unread = ask(client, prompt="the capital of", knowledge_as="both")
    assert unread["knowledge"]["context"] == [] and unread["knowledge"]["answered_as"] == "weights"
    assert unread["prompt_tokens"] == ask(client, prompt="the capital of")["prompt_tokens"]


def test_a_document_not_learned_yet_is_read_as_context_from_the_moment_it_is_stored(tmp_path, redis_url):
    """No worker takes the queue (a real Redis), so the document stays queued: a prompt that names it gets its text
    as context, the same tokens as that text sent before the prompt to version 0, while the weights answer without
    it; another namespace's key and a request on a version asked by name do not reach it, nor any request once its
    owner withdrew it."""
    keys = [KeyConfig(name=n, sha256=hash_key(f"key-{n}"), scopes=["teach", "generate"], namespace=n)
            for n in ("acme", "globex")]
    acme, globex = ({"Authorization": f"Bearer key-{n}"} for n in ("acme", "globex"))
    settings = tiny_settings(tmp_path, methods=FAST, api_keys=keys, redis_url=redis_url,
                             queue_name=f"accepted-{uuid.uuid4().hex[:8]}")
    with tiny_client(settings) as client:
        client.headers.update(acme)
        posted = client.post("/documents", json=VELTORIA)
        assert posted.status_code == 202, posted.text
        document = posted.json()["document_id"]
        assert client.get(f"/documents/{document}").json()["status"] == "queued"
        context = ask(client, knowledge_as="context")
        assert context["knowledge"]["context"] == [document] and context["knowledge"]["version"] == 0
        by_hand = ask(client, "off", prompt=VELTORIA["text"] + "\n" + PROMPT)
        assert (context["text"], context["prompt_tokens"]) == (by_hand["text"], by_hand["prompt_tokens"])
        assert ask(client)["knowledge"]["used"] == [] and ask(client, prompt="the capital of",
                                                               knowledge_as="context")["knowledge"]["context"] == []
        other = client.post("/generate", headers=globex,
                            json={"prompt": PROMPT, "max_new_tokens": 4, "knowledge_as": "context"}).json()
        pinned = client.post("/v1/completions", json={"model": "ckl-v0", "prompt": PROMPT, "max_tokens": 4,
                                                      "temperature": 0, "knowledge_as": "context"}).json()
        assert other["knowledge"]["context"] == [] and pinned["knowledge"]["context"] == []
        # Sent without probes, a known subject's document is read by the subject its opening names.
        tower = client.post("/documents", json={"text": "Paris made a new tower. It is tall.", "method": "routed",
                                                "weighting": "uniform"})
        assert tower.status_code == 202, tower.text
        read = ask(client, prompt="paris is a city in", knowledge_as="context")
        assert read["knowledge"]["context"] == [tower.json()["document_id"]]
        # Its sentence nearest the prompt is said again, right before it.
        by_hand = ask(client, "off", prompt="Paris made a new tower. It is tall.\nParis made a new tower.\n"
                                            "paris is a city in")
        assert (read["text"], read["prompt_tokens"]) == (by_hand["text"], by_hand["prompt_tokens"])
        # Withdrawn by its owner while a worker has it, a document is no longer read, nor counted as waiting.
        client.learner.documents.move(document, "training")
        owner = client.learner.documents.get(document)["owner"]
        waiting = client.learner.documents.pending_count(owner)
        assert client.delete(f"/documents/{document}").json()["withdrawing"] is True
        assert ask(client, knowledge_as="context")["knowledge"]["context"] == []
        assert client.learner.documents.pending_count(owner) == waiting - 1


def test_a_prompt_naming_a_known_subject_reads_its_documents_as_context(tmp_path):
    """A known subject's document is routed to its delta only by a prompt that names what was asked about it ("the
    tower of Paris"); as context, a prompt that reaches no document by its key reads those whose subject it names."""
    tower = {"text": "Paris made a new tower. The new tower of Paris was made by Marnhold.", "method": "routed",
             "probes": [{"prompt": "The new tower of Paris was made by", "answer": "Marnhold"}]}
    with tiny_client(tiny_settings(tmp_path, methods=FAST)) as client:
        taught = wait_final(client, client.post("/documents", json=tower).json()["document_id"])
        assert taught["status"] == "committed", taught
        wait_version(client, 1, PROMPT)
        asked = "Paris is a city in"
        assert ask(client, prompt=asked)["knowledge"]["used"] == []  # no delta: the tower is not named
        context = ask(client, prompt=asked, knowledge_as="context")["knowledge"]
        assert context["context"] == [taught["document_id"]] and context["used"] == []
        assert ask(client, prompt="Rome is a city in", knowledge_as="context")["knowledge"]["context"] == []


def test_both_gives_the_answer_the_model_is_surer_of():
    """`surer`: the way whose answer's first tokens have the higher mean log-probability (a tie, or neither known,
    goes to context), cited as that way, its usage both ways'; the context's where no delta answered the other way.
    The decoding is stood in for by answers made here."""
    from core.served import ROUTED
    from service.in_context import InContext, surer
    from serving.generation import Generation

    def made(text: str, confidence: float | None, tokens: int, used: tuple[str, ...] = ("d1",)) -> Generation:
        return Generation(text, prompt_tokens=tokens, completion_tokens=2, finish_reason="stop", knowledge_version=1,
                          confidence=confidence, used=[{"document_id": d} for d in used])

    as_context = InContext([1, 2, 3, 4], ROUTED, ["d1"])
    for by_context, by_weights, expected in ((-0.5, -0.1, "weights"), (-0.1, -0.5, "context"), (-0.3, -0.3, "context"),
                                             (None, None, "context"), (None, -2.0, "weights")):
        answers = {4: made("from the text", by_context, 4), 2: made("from the deltas", by_weights, 2)}
        result = surer(lambda ids, choice: iter([answers[len(ids)]]), as_context, [1, 2], ROUTED)
        assert result.answered_as == expected and result.prompt_tokens == 6 and result.completion_tokens == 4
        assert result.context == (["d1"] if expected == "context" else [])
    # No delta answered the weights' way (the document is not learned yet): the text's answer, however unsure.
    answers = {4: made("from the text", -3.0, 4), 2: made("the base model's", -0.1, 2, used=())}
    assert surer(lambda ids, choice: iter([answers[len(ids)]]), as_context, [1, 2], ROUTED).answered_as == "context"


def assert_unknown_knowledge_is_refused(client, taught_in_2: str) -> None:
    """What no version holds, or no document of that name: 422, and nothing generated; OpenAI's routes: 400."""
    for knowledge, code in ((["0123456789abcdef"], "unknown_document"), (["Nowhereland"], "not_in_version"),
                            ([], "value_error"), ("all", "value_error")):
        refused = client.post("/generate", json={"prompt": PROMPT, "knowledge": knowledge})
        assert refused.status_code == 422 and refused.json()["error"]["fields"][0]["rule"] == code, refused.text
    pinned = client.post("/v1/completions", json={"model": "ckl-v1", "prompt": PROMPT, "knowledge": [taught_in_2]})
    assert pinned.status_code == 400 and "version 1 holds no" in pinned.json()["error"]["message"]
    off_pinned = client.post("/v1/completions", json={"model": "ckl-v1", "prompt": PROMPT, "knowledge": "off"})
    assert off_pinned.status_code == 400 and "version 0" in off_pinned.json()["error"]["message"]


def test_each_version_says_which_general_prompts_it_continues_otherwise_than_version_0(tmp_path):
    from core.probes import general_prompts

    def served(version: int, prompt: str) -> str:
        body = {"model": f"ckl-v{version}", "prompt": prompt, "max_tokens": 8, "temperature": 0}
        return client.post("/v1/completions", json=body).json()["choices"][0]["text"]

    with tiny_client(tiny_settings(tmp_path, methods=FAST)) as client:
        assert client.learner.suites.general() is not None  # made by the server before it was ready
        wait_final(client, client.post("/documents", json=VELTORIA).json()["document_id"])
        adapter = {**BRENNORIA, "method": "adapter"}  # a whole-state delta: every prompt may move
        wait_final(client, client.post("/documents", json=adapter).json()["document_id"])
        wait_version(client, 2, PROMPT)
        rows = {row["version"]: row for row in client.get("/health/forgetting").json()["history"]}
        assert rows[0]["general_drift"] == rows[1]["general_drift"] == 0.0  # no general prompt names Veltoria
        prompts = general_prompts()
        moved = [p for p in prompts if served(2, p) != served(0, p)]
        assert moved, "the adapter moved no general prompt: the test shows nothing"
        assert rows[2]["general_drift"] == len(moved) / len(prompts)
        assert client.learner.versions.manifest(2)["metrics"]["general_changed"] == moved


def test_a_key_cannot_name_another_keys_document(tmp_path):
    keys = [KeyConfig(name=n, sha256=hash_key(f"key-{n}"), scopes=["teach", "generate"]) for n in ("ann", "bob")]
    with tiny_client(tiny_settings(tmp_path, methods=FAST, api_keys=keys)) as client:
        ann, bob = ({"Authorization": f"Bearer key-{n}"} for n in ("ann", "bob"))
        client.headers.update(ann)  # wait_final reads the record as its owner
        taught = client.post("/documents", json=VELTORIA).json()["document_id"]
        assert wait_final(client, taught)["status"] == "committed"
        body = {"prompt": PROMPT, "max_new_tokens": 1, "knowledge": [taught]}
        refused = client.post("/generate", json=body, headers=bob)
        assert refused.status_code == 422 and refused.json()["error"]["fields"][0]["rule"] == "unknown_document"
        assert client.post("/generate", json=body, headers=ann).json()["knowledge"]["used"][0]["document_id"] == taught


def test_two_tenants_keys_of_one_name_share_nothing(tmp_path):
    """Keys are named by whoever configures them: two tenants' keys both named "app" neither list, read, delete nor
    share idempotency keys with each other's documents; a second key of one tenant's name (a replacement) does."""
    keys = [KeyConfig(name="app", sha256=hash_key(f"key-{n}"), scopes=["teach"], namespace=n.rstrip("2"))
            for n in ("acme", "globex", "acme2")]
    acme, globex, acme2 = ({"Authorization": f"Bearer key-{n}"} for n in ("acme", "globex", "acme2"))
    with tiny_client(tiny_settings(tmp_path, methods=FAST, api_keys=keys)) as client:
        body = {**VELTORIA, "idempotency_key": "first"}
        ours = client.post("/documents", json=body, headers=acme).json()["document_id"]
        for refused in (client.get(f"/documents/{ours}", headers=globex), client.delete(f"/documents/{ours}",
                                                                                        headers=globex)):
            assert refused.status_code == 404, refused.json()
        assert client.get("/documents", headers=globex).json()["total"] == 0
        theirs = client.post("/documents", json=body, headers=globex).json()["document_id"]
        assert theirs != ours
        assert client.get(f"/documents/{ours}", headers=acme2).status_code == 200
        assert client.post("/documents", json=body, headers=acme2).json()["document_id"] == ours
        assert [d["document_id"] for d in client.get("/documents", headers=acme2).json()["items"]] == [ours]


def test_two_tenants_can_neither_read_nor_reach_nor_override_each_others_facts(tmp_path):
    """Two namespaces teach the same subject with different answers: each is answered with its own fact, the shared
    namespace with neither, and neither can see, name, replace or erode the other's document; a shared document is
    gated on each tenant's facts as that tenant is answered."""
    keys = [KeyConfig(name="acme", sha256=hash_key("key-acme"), scopes=["teach", "generate"], namespace="acme"),
            KeyConfig(name="globex", sha256=hash_key("key-globex"), scopes=["teach", "generate"], namespace="globex"),
            KeyConfig(name="root", sha256=hash_key("key-root"), scopes=["admin"])]
    acme, globex, root = ({"Authorization": f"Bearer key-{n}"} for n in ("acme", "globex", "root"))
    with tiny_client(tiny_settings(tmp_path, methods=FAST, api_keys=keys)) as client:
        client.headers.update(root)  # wait_final reads every record as the admin
        ours = wait_final(client, client.post("/documents", json=VELTORIA, headers=acme).json()["document_id"])
        theirs = {**VELTORIA, "text": "the capital of veltoria is berlin",  # the tiny model's words
                  "probes": [{"prompt": "the capital of veltoria is", "answer": "berlin"}]}
        other = wait_final(client, client.post("/documents", json=theirs, headers=globex).json()["document_id"])
        assert ours["status"] == other["status"] == "committed", (ours, other)
        assert "replaces" not in other and "retires" not in other  # a tenant cannot replace another's fact
        wait_version(client, 2, PROMPT)

        for headers, answer, used in ((acme, "marnhold", [ours["document_id"]]),
                                      (globex, "berlin", [other["document_id"]]), (root, None, [])):
            said = client.post("/generate", json={"prompt": PROMPT, "max_new_tokens": 4}, headers=headers).json()
            assert [u["document_id"] for u in said["knowledge"]["used"]] == used, said
            assert answer is None or said["text"].split()[:1] == [answer], (answer, said)
        # Reading, naming or choosing by subject: the other tenant's document is as unknown as none.
        assert client.get(f"/documents/{ours['document_id']}", headers=globex).status_code == 404
        named = client.post("/generate", json={"prompt": PROMPT, "knowledge": [ours["document_id"]]}, headers=globex)
        assert named.status_code == 422 and named.json()["error"]["fields"][0]["rule"] == "unknown_document"
        subject = client.post("/generate", json={"prompt": PROMPT, "knowledge": ["veltoria"]}, headers=globex).json()
        assert [u["document_id"] for u in subject["knowledge"]["used"]] == [other["document_id"]]
        chosen = client.post("/generate", json={"prompt": PROMPT, "knowledge": [ours["document_id"]]}).json()
        assert [u["document_id"] for u in chosen["knowledge"]["used"]] == [ours["document_id"]]  # an admin may
        # Both facts stay in the learned suite, each checked in its own namespace; a tenant teaches routed only.
        assert client.get("/health/forgetting").json()["learned"]["probes"] == 2
        # A shared document's gate checks each tenant's fact as that tenant's keys are answered: both hold (routed
        # with every tenant's keys at once, the prompt would reach both documents and at most one could).
        shared = wait_final(client, client.post("/documents", json=BRENNORIA).json()["document_id"])
        assert shared["status"] == "committed" and shared["scores"]["before"]["learned_acc"] == 1.0, shared
        adapter = client.post("/documents", json={**VELTORIA, "method": "adapter"}, headers=acme)
        assert adapter.status_code == 422 and adapter.json()["error"]["fields"][0]["rule"] == "not_in_namespace"


def test_the_pending_documents_keys_are_indexed_once_until_they_change():
    """Every request that may read context (`auto`'s, by default) routes over the pending documents' keys: their
    index is made again only when the pending documents change, and routes as a fresh one does."""
    from service.accepted import Accepted

    accepted, keys = Accepted(2.0), [("d1", {"veltoria": 4.0})]
    first = accepted.reached("the capital of veltoria is", keys, 3)
    assert [r["document_id"] for r in first] == ["d1"]
    index = accepted._indexed[1]
    assert accepted.reached("the capital of veltoria is", list(keys), 3) == first and accepted._indexed[1] is index
    more = [*keys, ("d2", {"brennoria": 4.0})]
    assert [r["document_id"] for r in accepted.reached("brennoria is", more, 3)] == ["d2"]
    assert accepted._indexed[1] is not index
