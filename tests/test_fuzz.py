"""Fuzzing every operation of the OpenAPI schema (schemathesis) against the app on the tiny model: valid and
invalid requests alike must never get a 5xx, and every error must come in the JSON envelope."""
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from tests.api_app import tiny_client, tiny_settings

EXAMPLES = 12  # per operation and mode: 17 operations x 2 modes, about 15 s on the tiny model


def test_no_request_from_the_schema_gets_a_5xx_or_a_bare_error(tmp_path, capsys):
    cases = []
    with tiny_client(tiny_settings(tmp_path, max_steps=2)) as client:
        schema = schemathesis.openapi.from_dict(client.app.openapi())
        operations = list(schema.get_all_operations())
        for result in operations:
            operation = result.ok()
            for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

                @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                          suppress_health_check=list(HealthCheck))
                @given(case=operation.as_strategy(generation_mode=mode))
                def check(case):
                    sent = case.as_transport_kwargs(base_url="http://127.0.0.1")
                    response = client.request(**{k: v for k, v in sent.items() if k != "cookies"})
                    cases.append((case.method, case.path, response.status_code))
                    assert response.status_code < 500, (sent, response.text)
                    if response.status_code >= 400:
                        error = response.json()["error"]
                        assert error["message"] and ("code" in error), (sent, response.text)

                try:
                    check()
                except Unsatisfiable:  # nothing to make invalid (an operation without parameters or body)
                    assert mode is schemathesis.GenerationMode.NEGATIVE
    statuses = sorted({status for *_, status in cases})
    with capsys.disabled():
        print(f"\nfuzz: {len(cases)} requests over {len(operations)} operations, statuses {statuses}")
    assert len(cases) > 150 and any(s >= 400 for s in statuses) and any(s < 300 for s in statuses)
