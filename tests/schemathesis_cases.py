"""Schema-generated requests against a live service, checked as its OpenAPI document says:
shared by the proxy's and the gateway's schemathesis tests. Generation is derandomized,
so a run repeats."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

DOCUMENTED: list[Callable[..., None]] = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
"""Every answer: no 5xx, a documented status and media type, the documented schema, and
schema-violating requests refused."""


def error_shape(ctx: Any, response: Any, case: Any) -> None:
    """A refusal is `{"type": "error", "error": {"type": ..., "message": ...}}`, nothing else."""
    if response.status_code < 400:
        return
    body = response.json()
    assert body["type"] == "error", body
    assert isinstance(body["error"]["type"], str) and body["error"]["message"], body


def run_cases(
    operation: Any,
    mode: GenerationMode,
    *,
    base_url: str,
    headers: dict[str, str],
    checks: Sequence[Callable[..., None]],
    examples: int,
    timeout: float,
) -> int:
    """How many generated requests of `mode` the operation answered, each passing `checks`."""
    ran = [0]

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def exercise(case: Any) -> None:
        ran[0] += 1
        case.call_and_validate(
            base_url=base_url, headers=headers, checks=list(checks), timeout=timeout
        )

    exercise()
    return ran[0]
