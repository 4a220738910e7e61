"""Every 4xx of the API, its JSON envelope, and idempotency: FastAPI's TestClient on the tiny model."""
import pytest

from tests.api_app import tiny_client, tiny_settings, wait_final

FACT = {"text": "the capital of veltoria is marnhold",
        "probes": [{"prompt": "the capital of veltoria is", "answer": "marnhold"}]}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    settings = tiny_settings(tmp_path_factory.mktemp("api"), max_prompt_tokens=64, max_new_tokens_cap=100)
    with tiny_client(settings) as c:
        yield c


def fields_of(response) -> list[dict[str, str]]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "fields"}
    return [{"field": f["field"], "rule": f["rule"]} for f in body["error"]["fields"]]


@pytest.mark.parametrize("body,field,rule", [
    ({"prompt": ""}, "prompt", "string_too_short"),
    ({"prompt": "   \n"}, "prompt", "value_error"),
    ({"prompt": "word " * 200}, "prompt", "max_tokens"),
    ({"prompt": "x", "max_new_tokens": 0}, "max_new_tokens", "greater_than"),
    ({"prompt": "x", "max_new_tokens": 101}, "max_new_tokens", "less_than_equal"),
    ({"prompt": "x", "temperature": -0.1}, "temperature", "greater_than_equal"),
    ({"prompt": "x", "top_p": 0}, "top_p", "greater_than"),
    ({"prompt": "x", "top_p": 1.5}, "top_p", "less_than_equal"),
    ({"prompt": "x", "bogus": 1}, "bogus", "extra_forbidden"),
    ({"prompt": 12}, "prompt", "string_type"),
    ({"prompt": "x", "max_new_tokens": "many"}, "max_new_tokens", "int_parsing"),
    ({}, "prompt", "missing"),
])
def test_bad_generate_input_is_a_422_naming_field_and_rule(client, body, field, rule):
    r = client.post("/generate", json=body)
    assert r.status_code == 422, r.text
    assert {"field": field, "rule": rule} in fields_of(r)


def test_non_json_body_is_a_422(client):
    r = client.post("/generate", content=b"not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and fields_of(r)[0]["rule"] == "json_invalid"


@pytest.mark.parametrize("body,field,rule", [
    ({**FACT, "method": "nope"}, "method", "value_error"),
    ({**FACT, "weighting": "nope"}, "weighting", "literal_error"),
    ({**FACT, "text": " "}, "text", "value_error"),
    ({"text": "no answer here", "probes": FACT["probes"], "weighting": "oracle"}, "weighting", "needs_answers_in_text"),
    ({**FACT, "probes": [{"prompt": "p", "answer": ""}]}, "probes.0.answer", "string_too_short"),
])
def test_a_refused_document_is_a_422_and_stores_nothing(client, body, field, rule):
    before = client.get("/documents").json()["total"]
    r = client.post("/documents", json=body)
    assert r.status_code == 422, r.text
    assert {"field": field, "rule": rule} in fields_of(r)
    assert client.get("/documents").json()["total"] == before


def test_unknown_method_names_the_registered_ones(client):
    message = client.post("/documents", json={**FACT, "method": "nope"}).json()["error"]["message"]
    assert "adapter" in message and "memory" in message


def test_unknown_ids_are_404(client):
    for r in (client.get("/documents/0123456789abcdef"), client.get("/documents/not-an-id!"),
              client.delete("/documents/0123456789abcdef"), client.post("/versions/99/activate", json={})):
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_idempotency_key_returns_the_same_document_and_refuses_another_body(client):
    body = {**FACT, "idempotency_key": "k-1"}
    first = client.post("/documents", json=body)
    again = client.post("/documents", json=body)
    assert first.status_code == again.status_code == 202
    assert first.json()["document_id"] == again.json()["document_id"]
    total = client.get("/documents").json()["total"]
    other = client.post("/documents", json={**body, "text": "the capital of veltoria is marnhold and rome"})
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_conflict"
    assert client.get("/documents").json()["total"] == total
    record = wait_final(client, first.json()["document_id"])
    assert record["status"] == "committed", record


def test_an_adapter_document_cannot_be_removed_one_by_one(client):
    accepted = client.post("/documents", json={**FACT, "method": "adapter"}).json()
    record = wait_final(client, accepted["document_id"])
    assert record["status"] == "committed", record
    r = client.delete(f"/documents/{record['document_id']}")
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_removable"
    assert "memory" in r.json()["error"]["message"]


def test_an_offset_past_what_the_database_takes_is_a_422_not_a_500(client):
    assert client.get("/documents", params={"offset": 10**20}).status_code == 422
    largest = client.get("/documents", params={"offset": 2**63 - 1})
    assert largest.status_code == 200 and largest.json()["items"] == []


def test_a_redis_url_is_printed_without_its_password():
    from core.queue import without_password

    assert without_password("redis://:s3cret@redis:6379/0") == "redis://:***@redis:6379/0"
    assert without_password("redis://app:s3cret@10.0.0.1/1") == "redis://app:***@10.0.0.1/1"
    assert without_password("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"

