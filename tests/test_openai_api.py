"""The OpenAI routes on the tiny model, driven by the official `openai` client (its HTTP client is the app's
TestClient), and streaming on /generate."""
import json

import openai
import pytest

from tests.api_app import tiny_client, tiny_settings, wait_final, wait_version

FACT = {"text": "the capital of veltoria is marnhold", "method": "routed",
        "probes": [{"prompt": "the capital of veltoria is", "answer": "marnhold"}]}


@pytest.fixture
def served(tmp_path):
    with tiny_client(tiny_settings(tmp_path, methods={"routed": {"learning_rate": 3e-2}})) as client:
        yield client, openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="unused", http_client=client,
                                    max_retries=0)


def test_completions_whole_and_streamed_agree_and_name_the_version(served):
    client, api = served
    whole = api.completions.create(model="ckl", prompt="the capital of", max_tokens=5, temperature=0)
    assert whole.system_fingerprint == "ckl-v0" and whole.usage.completion_tokens <= 5
    assert whole.choices[0].finish_reason in ("stop", "length")
    chunks = list(api.completions.create(model="ckl", prompt="the capital of", max_tokens=5, temperature=0,
                                         stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    raw = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, "stream": True}).text
    assert raw.rstrip().endswith("data: [DONE]")


def test_chat_uses_a_plain_format_when_the_tokenizer_has_no_template(served):
    _, api = served
    answer = api.chat.completions.create(model="ckl", messages=[{"role": "user", "content": "hello"}], max_tokens=3,
                                         temperature=0)
    assert answer.object == "chat.completion" and answer.choices[0].message.role == "assistant"
    streamed = api.chat.completions.create(model="ckl", messages=[{"role": "user", "content": "hello"}], max_tokens=3,
                                           temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == answer.choices[0].message.content


def test_a_version_is_pinned_by_model_name_and_errors_are_openai_shaped(served):
    client, api = served
    record = wait_final(client, client.post("/documents", json=FACT).json()["document_id"])
    assert record["status"] == "committed"
    wait_version(client, 1, "the capital of veltoria is")
    assert [m.id for m in api.models.list().data] == ["ckl", "ckl-v0", "ckl-v1"]
    now = api.completions.create(model="ckl", prompt="the capital of veltoria is", max_tokens=1, temperature=0)
    before = api.completions.create(model="ckl-v0", prompt="the capital of veltoria is", max_tokens=1, temperature=0)
    assert now.choices[0].text.strip() == "marnhold" and now.system_fingerprint == "ckl-v1"
    assert before.choices[0].text.strip() != "marnhold" and before.system_fingerprint == "ckl-v0"
    removal = client.delete(f"/documents/{record['document_id']}").json()["document_id"]
    assert wait_final(client, removal)["status"] == "committed"
    with pytest.raises(openai.NotFoundError):  # asking the version from before the removal would undo it
        api.completions.create(model="ckl-v1", prompt="the capital of veltoria is", max_tokens=1)
    assert [m.id for m in api.models.list().data] == ["ckl", "ckl-v0", "ckl-v2"]
    with pytest.raises(openai.NotFoundError) as missing:
        api.completions.create(model="ckl-v9", prompt="x", max_tokens=1)
    assert missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as refused:  # n > 1 is refused, in OpenAI's error shape
        api.completions.create(model="ckl", prompt="x", n=2)
    assert refused.value.body["param"] == "n" and refused.value.body["type"] == "invalid_request_error"


def test_generate_streams_pieces_then_usage_and_version(served):
    client, _ = served
    body = {"prompt": "the capital of", "max_new_tokens": 4}
    whole = client.post("/generate", json=body).json()
    raw = client.post("/generate", json={**body, "stream": True})
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[len("data: "):]) for line in raw.text.splitlines() if line.startswith("data: ")]
    assert "".join(e.get("text", "") for e in events[:-1]) == whole["text"]
    assert events[-1]["done"] and events[-1]["knowledge_version"] == 0
    assert events[-1]["completion_tokens"] == whole["completion_tokens"]


def test_a_generation_closed_unfinished_frees_its_slot(tmp_path):
    from service.errors import ApiError
    from service.generations import GenerationService
    from service.metrics import Metrics
    from serving.generation import SamplingParams

    with tiny_client(tiny_settings(tmp_path, max_concurrent_generations=1, max_waiting_generations=0)) as client:
        runtime = client.app.state.runtime
        generations = GenerationService(runtime, Metrics(runtime))
        ids = generations.prompt_ids("the capital of", 50)
        first = generations.stream(ids, SamplingParams(max_new_tokens=50))  # started, never read: a client gone
        with pytest.raises(ApiError) as full:
            generations.stream(ids, SamplingParams(max_new_tokens=1))
        assert full.value.status == 429
        first.close()
        *_, done = generations.stream(ids, SamplingParams(max_new_tokens=1))
        assert done.completion_tokens <= 1


def test_the_openai_client_against_a_live_server_with_concurrent_streams(tiny_model_dir, tmp_path):
    """Real uvicorn on the tiny model: the official client, eight streams at once (batched), and an error."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    from tests.conftest import Server, tiny_env

    server = Server(tmp_path / "data", tiny_env(tiny_model_dir)).start()
    try:
        server.wait_ready(120)
        api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        prompts = ["the capital of", "a city in", "paris and berlin", "the new product of the company"] * 2
        alone = [api.completions.create(model="ckl", prompt=p, max_tokens=12, temperature=0).choices[0].text
                 for p in prompts]

        def streamed(prompt: str) -> str:
            chunks = api.completions.create(model="ckl", prompt=prompt, max_tokens=12, temperature=0, stream=True)
            return "".join(c.choices[0].text for c in chunks)
        with ThreadPoolExecutor(len(prompts)) as pool:
            assert list(pool.map(streamed, prompts)) == alone
        chat = api.chat.completions.create(model="ckl-v0", messages=[{"role": "user", "content": "hello"}],
                                           max_tokens=3, temperature=0)
        assert chat.system_fingerprint == "ckl-v0"
        with pytest.raises(openai.NotFoundError):
            api.completions.create(model="ckl-v9", prompt="hi", max_tokens=1)
    finally:
        server.kill(signal.SIGTERM)
