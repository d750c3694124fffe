"""A published profile version, as the registry holds it: the pinned bytes, who published
them and when."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, computed_field

from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.stored import UtcDateTime


class PublishedProfile(BaseModel):
    # A dump holds `ref`, `engine` and `role`, which are derived again (not read) when a
    # dump is validated.
    model_config = ConfigDict(frozen=True, from_attributes=True)

    name: str
    version: str
    digest: str
    canonical: str
    owner: str
    created_at: UtcDateTime

    @property
    def pinned(self) -> PinnedProfile:
        return PinnedProfile(
            name=self.name, version=self.version, digest=self.digest, canonical=self.canonical
        )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def engine(self) -> str:
        return self.pinned.profile().engine

    @computed_field  # type: ignore[prop-decorator]
    @property
    def role(self) -> str:
        return self.pinned.profile().role
