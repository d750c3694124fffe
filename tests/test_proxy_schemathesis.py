"""Schemathesis against the real proxy under uvicorn: its OpenAPI document is the contract.

Every operation gets schema-valid and schema-violating requests carrying a valid scoped token;
each answer must be documented (status and media type), conform to its documented schema, be
no 5xx, and refuse in Anthropic's error shape. Generation is derandomized, so a run repeats.
"""

import logging

import pytest
import schemathesis
from schemathesis.generation import GenerationMode

from tests.live_services import platform, set_script
from tests.schemathesis_cases import DOCUMENTED, error_shape, run_cases

EXAMPLES_PER_MODE = {"POST /v1/messages": 50, "POST /v1/messages/count_tokens": 25}
OTHER_OPERATION_EXAMPLES = 5


def run_operation(operation, mode: GenerationMode, base_url: str, headers: dict) -> int:
    return run_cases(
        operation,
        mode,
        base_url=base_url,
        headers=headers,
        checks=[*DOCUMENTED, error_shape],
        examples=EXAMPLES_PER_MODE.get(operation.label, OTHER_OPERATION_EXAMPLES),
        timeout=60,
    )


def proxy_errors(caplog: pytest.LogCaptureFixture) -> str:
    """What the proxy logged at error level (a worker's traceback among them), for a failure
    message: the reason behind a 500 is there, not in the response."""
    return "\n".join(
        record.getMessage()
        for record in caplog.records
        if record.name.startswith(("synth.proxy", "uvicorn")) and record.levelno >= logging.ERROR
    )


@pytest.mark.slow
def test_proxy_answers_schema_generated_requests_as_documented_and_never_with_5xx(
    state, monkeypatch, caplog
):
    caplog.set_level(logging.ERROR)
    with platform(monkeypatch) as (model_url, proxy):
        set_script(model_url, [{"completion": "fuzzed", "repeat": True}])
        schema = schemathesis.openapi.from_url(f"{proxy.url}/openapi.json")
        headers = {"x-api-key": proxy.token()}
        ran: dict[str, int] = {}
        for result in schema.get_all_operations():
            operation = result.ok()
            # Only a body has values outside its schema; a path's string parameter has none.
            modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE][: 1 + bool(operation.body)]
            for mode in modes:
                try:
                    ran[f"{operation.label} {mode.value}"] = run_operation(
                        operation, mode, proxy.url, headers
                    )
                except Exception as failure:
                    raise AssertionError(
                        f"{operation.label} {mode.value}: {failure}\n"
                        f"the proxy logged:\n{proxy_errors(caplog) or '(nothing)'}"
                    ) from failure
        assert ran["POST /v1/messages positive"] >= EXAMPLES_PER_MODE["POST /v1/messages"]
        assert ran["POST /v1/messages negative"] >= EXAMPLES_PER_MODE["POST /v1/messages"]
        print(f"schemathesis cases: {sum(ran.values())} {ran}")
