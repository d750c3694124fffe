"""Organizations' admission limits, set and read by admins; what is over a limit waits."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from gateway.auth import Admin
from gateway.openapi import refusals
from gateway.state import State
from synth_pipelines.contracts.operator_key import NAME_PATTERN
from synth_pipelines.contracts.org_limits import LimitsRequest, OrgLimits
from synth_pipelines.control.org_limits import get_limits, set_limits

router = APIRouter(prefix="/v1/orgs", tags=["orgs"])
OrgName = Annotated[str, Path(pattern=NAME_PATTERN, description="The organization.")]


@router.get("/{org}/limits", response_model=OrgLimits, responses=refusals(403))
def read_limits(org: OrgName, _admin: Admin, state: State) -> OrgLimits:
    """The organization's limits; one nobody has set is unlimited (null)."""
    return get_limits(state.engine, org)


@router.put("/{org}/limits", response_model=OrgLimits, responses=refusals(400, 403))
def replace_limits(org: OrgName, request: LimitsRequest, admin: Admin, state: State) -> OrgLimits:
    """Replace both limits (null: unlimited); they apply from the next admission on, and a
    lowered one stops nothing already running."""
    return set_limits(state.engine, org, request, admin.owner)
