"""Agent profiles: the executable recipe of an actor or a judge, and its identity.

Identity is the SHA-256 of the profile's RFC 8785 canonical JSON bytes. Consumers
verify the digest of the bytes they received instead of re-serializing.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

import rfc8785
from pydantic import BaseModel, ConfigDict, Field, field_validator

from synth_pipelines.contracts.refs import check_name, check_version

Engine = Literal["oracle", "nop", "claude-code", "builtin"]


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    engine: Engine
    engine_version: str | None = None
    description: str = ""
    model: str | None = Field(
        default=None, description="base model id or checkpoint reference bound to the recipe"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value, "profile")

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        return check_version(value, "profile")

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


class PinnedProfile(BaseModel):
    """A profile as an experiment pinned it: canonical bytes and their digest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    digest: str
    canonical: str

    @classmethod
    def from_document(cls, document: dict) -> PinnedProfile:
        """Validate a profile document and pin the canonical form of the document itself
        (not a re-serialization of our model, so defaults added later never change it)."""
        profile = Profile.model_validate(document)
        data = rfc8785.dumps(document)
        return cls(
            name=profile.name,
            version=profile.version,
            digest=f"sha256:{hashlib.sha256(data).hexdigest()}",
            canonical=data.decode(),
        )

    def profile(self) -> Profile:
        """The recipe, after checking that the bytes still match the pinned digest."""
        data = self.canonical.encode()
        actual = f"sha256:{hashlib.sha256(data).hexdigest()}"
        if actual != self.digest:
            raise ValueError(
                f"profile {self.name}@{self.version} bytes do not match digest {self.digest} "
                f"(got {actual}): the pinned profile was altered"
            )
        return Profile.model_validate(json.loads(data))
