"""Operators' API keys, managed by admins: created (the secret shown once), listed, revoked."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.auth import Admin
from gateway.openapi import refusals
from gateway.state import State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.operator_key import CreatedKey, KeyRequest, OperatorKey
from synth_pipelines.control.interactive_tokens import revoke_sessions_of_key
from synth_pipelines.control.operator_keys import (
    KeyNotFoundError,
    create_key,
    list_keys,
    revoke_key,
)

router = APIRouter(prefix="/v1/keys", tags=["keys"])


@router.post("", response_model=CreatedKey, status_code=201, responses=refusals(400, 403))
def create(request: KeyRequest, _admin: Admin, state: State) -> CreatedKey:
    """A new key; its secret is in this response and never again."""
    return create_key(state.engine, state.config.key_secret, request)


@router.get("", response_model=list[OperatorKey], responses=refusals(403))
def list_(_admin: Admin, state: State, owner: str | None = None) -> list[OperatorKey]:
    """Every key (or one owner's), newest first, revoked and expired ones included."""
    return list_keys(state.engine, owner=owner)


@router.delete("/{key_id}", response_model=OperatorKey, responses=refusals(403, 404))
def revoke(key_id: str, _admin: Admin, state: State) -> OperatorKey:
    """Refuse the key from the next request on, and the session tokens it minted."""
    try:
        revoked = revoke_key(state.engine, key_id)
    except KeyNotFoundError as missing:
        raise ApiError("not_found_error", str(missing)) from None
    # What the key minted goes with it: its owner's harness sessions at the proxy.
    revoke_sessions_of_key(state.engine, key_id, f"API key {key_id} was revoked")
    return revoked
