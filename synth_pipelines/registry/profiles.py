"""Immutable profile versions: canonical bytes and their digest, verified on every read."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import ValidationError
from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from synth_pipelines.agents.constraints import LaunchConstraintError, check_launch_constraints
from synth_pipelines.agents.engines import engine_runtime
from synth_pipelines.contracts.profile import PinnedProfile, Profile, ProfileDigestError
from synth_pipelines.contracts.published_profile import PublishedProfile
from synth_pipelines.contracts.refs import parse_ref
from synth_pipelines.contracts.validation_errors import describe_validation_error
from synth_pipelines.control.schema import profile_versions


class ProfileError(ValueError):
    """A profile request that cannot be honored, with the reason for the operator."""


def _published(row) -> PublishedProfile:
    published = PublishedProfile.model_validate(row, from_attributes=True)
    try:
        published.pinned.profile()
    except ProfileDigestError as error:
        raise ProfileError(f"stored profile {row.name}@{row.version} is corrupt: {error}") from None
    return published


def _find(engine: Engine, name: str, version: str) -> PublishedProfile | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(profile_versions).where(
                profile_versions.c.name == name, profile_versions.c.version == version
            )
        ).first()
    return _published(row) if row else None


def check_launchable(profile: Profile) -> None:
    """Refuse, up front, a profile the launcher would refuse at every launch: one that
    changes the proxy route, the scoped token or the model binding, or pins another engine."""
    if profile.launched:
        try:
            check_launch_constraints(profile, engine_runtime(profile.engine))
        except LaunchConstraintError as error:
            raise ProfileError(str(error)) from None


def publish_profile(engine: Engine, document: dict, owner: str) -> tuple[PublishedProfile, bool]:
    """Store `name@version`; identical bytes again is a no-op, different bytes are refused."""
    try:
        pinned = PinnedProfile.from_document(document)
    except ValidationError as error:
        raise ProfileError(f"invalid profile: {describe_validation_error(error)}") from None
    check_launchable(pinned.profile())
    return register_profile(engine, pinned, owner)


def register_profile(
    engine: Engine, pinned: PinnedProfile, owner: str
) -> tuple[PublishedProfile, bool]:
    """Record a pinned profile under `name@version` once, by its digest: the same bytes
    again are a no-op; other bytes under a registered `name@version` are refused."""
    existing = _find(engine, pinned.name, pinned.version)
    if existing is None:
        try:
            with engine.begin() as conn:
                conn.execute(
                    insert(profile_versions).values(
                        name=pinned.name,
                        version=pinned.version,
                        digest=pinned.digest,
                        canonical=pinned.canonical,
                        owner=owner,
                        created_at=datetime.now(UTC),
                    )
                )
            found = _find(engine, pinned.name, pinned.version)
            assert found is not None
            return found, True
        except IntegrityError:
            existing = _find(engine, pinned.name, pinned.version)
            if existing is None:
                raise
    if existing.pinned.digest != pinned.digest:
        raise ProfileError(
            f"profile {pinned.name}@{pinned.version} is already published with digest "
            f"{existing.pinned.digest}; this document has {pinned.digest}. Published versions "
            "are immutable: give this one a new version"
        )
    return existing, False


def get_profile(engine: Engine, ref: str) -> PublishedProfile:
    try:
        name, version = parse_ref(ref, "profile")
    except ValueError as error:
        raise ProfileError(str(error)) from None
    found = _find(engine, name, version)
    if found is None:
        raise ProfileError(
            f"unknown profile {ref!r}; publish it with `synth profile publish` or see "
            "`synth profile list`"
        )
    return found


def list_profiles(engine: Engine) -> list[PublishedProfile]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(profile_versions).order_by(
                profile_versions.c.name, profile_versions.c.created_at
            )
        ).all()
    return [_published(row) for row in rows]
