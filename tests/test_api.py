"""POST /generate through a real uvicorn server on the real default model (bad input: test_api_errors.py)."""
import httpx
import pytest

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def server(tmp_path_factory, real_model_dir, nf_suite_file):
    from tests.conftest import Server, fresh_data_dir

    data = fresh_data_dir(tmp_path_factory.mktemp("api"), nf_suite_file)
    srv = Server(data, {"CKL_LIMITS_MAX_PROMPT_TOKENS": "64", "CKL_LIMITS_MAX_NEW_TOKENS_CAP": "100"}).start()
    srv.wait_ready()
    yield srv
    srv.kill()


def post(server, path, **kwargs):
    return httpx.post(f"{server.url}{path}", timeout=120, **kwargs)


def test_health_and_ready(server):
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
    ready = httpx.get(f"{server.url}/ready").json()
    assert ready["ready"] is True and ready["knowledge_version"] == 0


def test_the_base_model_knows_a_fact(server):
    r = post(server, "/generate", json={"prompt": "The Eiffel Tower is located in the city of", "max_new_tokens": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["text"].startswith(" Paris")
    assert body["knowledge_version"] == 0 and body["prompt_tokens"] == 10 and body["completion_tokens"] == 4
    assert body["finish_reason"] == "length" and body["timing"]["total_s"] > 0


@pytest.fixture(scope="module")
def plain_model(real_model_dir):
    """The same model folder loaded here with plain transformers: no server, scheduler or methods."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(real_model_dir)
    return AutoModelForCausalLM.from_pretrained(real_model_dir, dtype=torch.float32).eval(), tokenizer


def sampled_here(plain_model, prompt: str, tokens: int, temperature: float, top_p: float, seed: int) -> str:
    """`tokens` tokens sampled one by one on the plain model with the seeded generator the server seeds."""
    from types import SimpleNamespace

    import torch

    from serving.generation import eos_ids, sample_token, seeded

    model, tokenizer = plain_model
    stops = eos_ids(SimpleNamespace(model=model, tokenizer=tokenizer))  # the server's end-of-sequence tokens
    generator, ids, past, out = seeded(seed), torch.tensor([tokenizer(prompt)["input_ids"]]), None, []
    with torch.inference_mode():
        for _ in range(tokens):
            step = model(input_ids=ids, past_key_values=past, use_cache=True)
            token = sample_token(step.logits[0, -1].float(), temperature, top_p, generator)
            if token in stops:
                break
            out.append(token)
            past, ids = step.past_key_values, torch.tensor([[token]])
    return tokenizer.decode(out, skip_special_tokens=True)


def test_greedy_and_seeded_answers_are_those_of_the_plain_model(server, plain_model):
    """Greedy: transformers' own `generate` on a second load of the model. Seeded sampling: the same seed on that
    load, sampled token by token here; both requests of each kind must give that answer."""
    import torch

    model, tokenizer = plain_model
    prompt = "The largest planet in the Solar System is"
    ids = tokenizer(prompt, return_tensors="pt")
    with torch.inference_mode():
        generated = model.generate(**ids, max_new_tokens=12, do_sample=False)
    greedy = tokenizer.decode(generated[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    body = {"prompt": prompt, "max_new_tokens": 12}
    assert [post(server, "/generate", json=body).json()["text"] for _ in range(2)] == [greedy] * 2
    sampled = {**body, "temperature": 1.0, "top_p": 0.9, "seed": 7}
    expected = sampled_here(plain_model, prompt, 12, 1.0, 0.9, 7)
    assert [post(server, "/generate", json=sampled).json()["text"] for _ in range(2)] == [expected] * 2


def test_stop_string_ends_the_completion(server):
    body = post(server, "/generate", json={"prompt": "The Eiffel Tower is located in the city of",
                                           "max_new_tokens": 20, "stop": [","]}).json()
    assert body["text"] == " Paris" and body["finish_reason"] == "stop"
