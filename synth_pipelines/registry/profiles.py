"""Immutable profile versions: canonical bytes and their digest, verified on every read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, Row, insert, select
from sqlalchemy.exc import IntegrityError

from synth_pipelines.contracts.profile import PinnedProfile, ProfileDigestError
from synth_pipelines.contracts.published_profile import PublishedProfile
from synth_pipelines.contracts.refs import parse_ref
from synth_pipelines.control.schema import profile_versions


class ProfileError(ValueError):
    """A profile request that cannot be honored, with the reason for the operator."""


class ProfileNotFoundError(ProfileError, LookupError):
    pass


def _published(row: Row[Any]) -> PublishedProfile:
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
        raise ProfileNotFoundError(
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
