"""Operators' own harness sessions (`synth claude`): the gateway mints a scoped token for
the key's owner and one model, and revokes it on request or with the key that asked.

The token is an `interactive` one for the run `interactive`, signed with the platform's
key, so the proxy checks it as it checks every token: the model, the owner of a
checkpoint, its expiry and its revocation. Asking for a model the owner may not sample
(another owner's checkpoint, a model the proxy does not serve) is a 404, never saying
which.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from fastapi import APIRouter, Request

from gateway.auth import Operator
from gateway.openapi import refusals
from gateway.routes.model_calls import model_calls_url
from gateway.state import State
from synth_pipelines.agents.proxy_model import ProxyModelError, proxy_model
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.interactive_session import InteractiveSession, SessionRequest
from synth_pipelines.contracts.scoped_token import AttemptScope
from synth_pipelines.control.interactive_tokens import (
    SESSION_RUN,
    record_session,
    revoke_session,
)
from synth_pipelines.credentials import new_claims, sign_claims

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


@router.post(
    "", response_model=InteractiveSession, status_code=201, responses=refusals(400, 403, 404)
)
def create(
    request: SessionRequest, key: Operator, state: State, incoming: Request
) -> InteractiveSession:
    """A token for the key's owner to sample `model` through the capture proxy, which the
    harness reaches through this gateway (`/anthropic`), at the address it was asked at."""
    config = state.config
    scope = AttemptScope(
        run_id=SESSION_RUN,
        attempt_id=f"session-{uuid.uuid4().hex[:12]}",
        owner=key.owner,
        model=request.model,
        role="interactive",
    )
    claims = new_claims(scope, ttl_sec=request.ttl_sec)
    token = sign_claims(config.signing_key, claims)
    try:
        limits = proxy_model(config.proxy_url, token, request.model, timeout_sec=30)
    except ProxyModelError as error:
        if error.status in (403, 404):
            raise ApiError(
                "not_found_error",
                f"no model {request.model!r} you may sample; `synth model list` and `synth run "
                "checkpoints RUN` show the models and your checkpoints",
            ) from None
        if error.status is None:
            raise ApiError("api_error", str(error)) from None
        raise ApiError("api_error", f"the capture proxy answered {error.status}") from None
    record_session(state.engine, claims, key.key_id)
    return InteractiveSession(
        token=token,
        token_id=claims.token_id,
        scope=scope,
        model=request.model,
        expires_at=datetime.fromtimestamp(claims.expires_at, UTC),
        proxy_url=model_calls_url(str(incoming.base_url)),
        context_window=limits.max_input_tokens,
        max_output=limits.max_tokens,
    )


@router.delete("/{token_id}", status_code=204, responses=refusals(403, 404))
def revoke(token_id: str, key: Operator, state: State) -> None:
    """Refuse the session's token at the proxy from now on."""
    if not revoke_session(state.engine, token_id, key.owner, f"revoked by key {key.key_id}"):
        raise ApiError("not_found_error", f"no session {token_id!r} of yours")
