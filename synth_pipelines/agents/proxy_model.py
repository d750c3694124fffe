"""What the capture proxy says of one model (`GET /v1/models/{id}`), asked with a token
that may see it: an operator's before a run is accepted, an attempt's when it learns its
model's limits, a session's before the gateway hands it out.

Each asker words its own refusal (and its remedy) from what the proxy answered.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx
from pydantic import ValidationError

from synth_pipelines.contracts.api_errors import ErrorResponse
from synth_pipelines.contracts.model_info import ModelInfo
from synth_pipelines.tls import client_context


class ProxyModelError(RuntimeError):
    """The proxy did not describe the model: it was not reachable, or it refused."""

    def __init__(self, message: str, *, status: int | None) -> None:
        super().__init__(message)
        self.status = status
        """The proxy's answer (403 or 404: the model is not one the token may sample);
        none: the proxy was not reachable."""


def proxy_model(proxy_url: str, token: str, model: str, *, timeout_sec: float) -> ModelInfo:
    """The proxy at `proxy_url`'s entry for `model`, as `token` may see it."""
    try:
        found = httpx.get(
            # A name is a path (`tinker://...` included); anything else in it is quoted, so
            # a `?` or `#` cannot make it ask about another model.
            f"{proxy_url}/v1/models/{quote(model, safe='/:@')}",
            headers={"x-api-key": token},
            timeout=timeout_sec,
            verify=client_context(),
        )
    except httpx.HTTPError as error:
        raise ProxyModelError(
            f"the capture proxy at {proxy_url} is not reachable ({error})", status=None
        ) from None
    if found.status_code != 200:
        raise ProxyModelError(
            f"the capture proxy refuses model {model!r}: {_refusal(found)}",
            status=found.status_code,
        )
    return ModelInfo.model_validate_json(found.content)


def _refusal(answer: httpx.Response) -> str:
    """The proxy's message, or the body itself when something in between answered."""
    try:
        return ErrorResponse.model_validate_json(answer.content).error.message
    except ValidationError:
        return answer.text
