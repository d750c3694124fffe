"""Authentication as a FastAPI dependency: every call carries a scoped token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from proxy.revocations import revoked_message
from proxy.state import State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.scoped_token import TokenClaims
from synth_pipelines.credentials import (
    TokenInvalidError,
    TokenScopeError,
    check_model,
    verify_token,
)
from synth_pipelines.rendering.model_registry import ModelRegistry


@dataclass(frozen=True)
class Caller:
    claims: TokenClaims

    def check_model(self, model: str) -> None:
        if self.claims.role == "operator":
            raise ApiError("permission_error", "an operator token cannot sample models")
        try:
            check_model(self.claims, model)
        except TokenScopeError as error:
            # The harness (or the model driving it) chose the model: refusing it is the
            # attempt's outcome, not a platform fault that would exclude the attempt.
            raise ApiError("permission_error", str(error), callers_choice=True) from None

    def check_checkpoint_owner(self, registry: ModelRegistry, model: str) -> None:
        """A checkpoint is served, and described, only to its owner's tokens."""
        checkpoint = registry.checkpoint(model)
        if checkpoint is not None and checkpoint.owner != self.claims.owner:
            raise ApiError("permission_error", f"checkpoint {model} belongs to another owner")


def _presented_token(request: Request) -> str | None:
    key = request.headers.get("x-api-key")
    if key:
        return key
    authorization = request.headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


async def caller(request: Request, state: State) -> Caller:
    token = _presented_token(request)
    if token is None:
        raise ApiError(
            "authentication_error",
            "x-api-key header is required (or Authorization: Bearer <token>); "
            "mint one with `synth proxy token`",
        )
    try:
        claims = verify_token(state.signing_key, token)
    except TokenInvalidError as error:
        raise ApiError("authentication_error", str(error)) from None
    # Kept on the request so that a refusal further on can be recorded against the attempt.
    request.state.claims = claims
    revoked = state.revocations.reason(claims.token_id)
    if revoked is not None:
        raise ApiError("authentication_error", revoked_message(revoked))
    return Caller(claims)


def require_role(who: Caller, role: str) -> None:
    if who.claims.role != role:
        raise ApiError("permission_error", f"this endpoint needs a token with role {role!r}")


Authenticated = Annotated[Caller, Depends(caller)]
