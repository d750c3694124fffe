"""Schemathesis against the real gateway under uvicorn: its OpenAPI document is the contract.

Every operation gets schema-valid and schema-violating requests carrying an admin's key;
each answer must be documented (status and media type), conform to its documented schema,
be no 5xx, and refuse in the one error shape with a one-line message. Generation is
derandomized, so a run repeats."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis.errors import Unsatisfiable
from schemathesis.generation import GenerationMode

from tests.gateway_support import bearer, gateway
from tests.live_services import platform
from tests.schemathesis_cases import DOCUMENTED, error_shape, run_cases

EXAMPLES = 25


def one_line(ctx, response, case) -> None:
    """A refusal's message is one line."""
    if response.status_code >= 400:
        assert "\n" not in response.json()["error"]["message"], response.text


CHECKS = [*DOCUMENTED, error_shape, one_line]


def run_operation(operation, mode: GenerationMode, base_url: str, headers: dict) -> int:
    """How many generated requests of `mode` the operation answered as documented."""
    try:
        return run_cases(
            operation,
            mode,
            base_url=base_url,
            headers=headers,
            checks=CHECKS,
            examples=EXAMPLES,
            timeout=30,
        )
    except Unsatisfiable:
        # No request violates a schema whose every value is allowed (a free string path
        # parameter, an optional free string query).
        assert mode is GenerationMode.NEGATIVE, operation.label
        return 0


@pytest.mark.slow
def test_the_gateway_answers_schema_generated_requests_as_documented(state, monkeypatch):
    # A live proxy: a session's model is looked up there.
    with platform(monkeypatch) as (_model_url, proxy), gateway(proxy.url) as gw:
        headers = bearer(gw.key("root", role="admin"))
        run = gw.run("root")
        schema = schemathesis.openapi.from_url(f"{gw.url}/openapi.json")
        ran = {
            f"{operation.label} {mode.value}": run_operation(operation, mode, gw.url, headers)
            for operation in (result.ok() for result in schema.get_all_operations())
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        }
        # The real run's id answers too (generated ids are all unknown).
        case = schema["/v1/runs/{run_id}"]["GET"].Case(path_parameters={"run_id": run.run_id})
        case.call_and_validate(base_url=gw.url, headers=headers, checks=CHECKS)
        for label in ("POST /v1/keys", "GET /v1/runs", "GET /v1/runs/{run_id}/events"):
            assert ran[f"{label} positive"] >= EXAMPLES and ran[f"{label} negative"] >= 1, ran
        print(f"schemathesis cases: {sum(ran.values())} {ran}")
