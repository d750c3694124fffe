"""Profiles as an operator hands them in: refused up front when the launcher would refuse
them at every launch, before the registry records them or a run pins them."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine

from synth_pipelines.agents.constraints import LaunchConstraintError, check_launch_constraints
from synth_pipelines.agents.engines import engine_runtime
from synth_pipelines.contracts.profile import PinnedProfile, Profile
from synth_pipelines.contracts.published_profile import PublishedProfile
from synth_pipelines.contracts.validation_errors import describe_validation_error
from synth_pipelines.registry.profiles import ProfileError, register_profile


def check_launchable(profile: Profile) -> None:
    """Refuse, up front, a profile the launcher would refuse at every launch: one that
    changes the proxy route, the scoped token or the model binding, or pins another engine."""
    if profile.launched:
        try:
            check_launch_constraints(profile, engine_runtime(profile.engine))
        except LaunchConstraintError as error:
            raise ProfileError(str(error)) from None


def publish_profile(
    engine: Engine, document: dict[str, Any], owner: str
) -> tuple[PublishedProfile, bool]:
    """Store `name@version`; identical bytes again is a no-op, different bytes are refused."""
    try:
        pinned = PinnedProfile.from_document(document)
    except ValidationError as error:
        raise ProfileError(f"invalid profile: {describe_validation_error(error)}") from None
    check_launchable(pinned.profile())
    return register_profile(engine, pinned, owner)
