"""Liveness, and who a key is."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.auth import Viewer
from gateway.openapi import refusals
from synth_pipelines.contracts.operator_key import OperatorKey

router = APIRouter()


@router.get("/health", include_in_schema=False)
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/whoami", response_model=OperatorKey, responses=refusals())
def whoami(key: Viewer) -> OperatorKey:
    """The key the request was made with: the owner, organization and role it acts as."""
    return key
