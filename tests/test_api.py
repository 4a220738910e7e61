"""POST /generate through a real uvicorn server on the real default model (bad input: test_api_errors.py)."""
import httpx
import pytest

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def server(tmp_path_factory, real_model_dir, nf_suite_file):
    from tests.conftest import Server, fresh_data_dir

    data = fresh_data_dir(tmp_path_factory.mktemp("api"), nf_suite_file)
    srv = Server(data, {"CKL_MAX_PROMPT_TOKENS": "64", "CKL_MAX_NEW_TOKENS_CAP": "100"}).start()
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


def test_greedy_is_deterministic_and_seeded_sampling_repeats(server):
    greedy = {"prompt": "The largest planet in the Solar System is", "max_new_tokens": 12}
    assert post(server, "/generate", json=greedy).json()["text"] == post(server, "/generate", json=greedy).json()["text"]
    sampled = {**greedy, "temperature": 1.0, "top_p": 0.9, "seed": 7}
    assert post(server, "/generate", json=sampled).json()["text"] == post(server, "/generate", json=sampled).json()["text"]


def test_stop_string_ends_the_completion(server):
    body = post(server, "/generate", json={"prompt": "The Eiffel Tower is located in the city of",
                                           "max_new_tokens": 20, "stop": [","]}).json()
    assert body["text"] == " Paris" and body["finish_reason"] == "stop"
