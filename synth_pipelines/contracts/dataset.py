"""A dataset version: an immutable, ordered list of exact Harbor task versions."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

from synth_pipelines.contracts.refs import check_name, check_version
from synth_pipelines.contracts.stored import StoredDateTime
from synth_pipelines.contracts.table import TableRow

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"


class TaskRef(TableRow):
    """One task of a dataset version, pinned by Harbor's content digest."""

    position: int = Field(ge=0)
    name: str
    digest: str = Field(pattern=DIGEST_PATTERN)
    package_key: str
    package_sha256: str


class DatasetVersion(BaseModel):
    """A published version, as the control database holds it."""

    # A dump holds `ref`, which is derived again (not read) when a dump is validated.
    model_config = ConfigDict(frozen=True, from_attributes=True)

    name: str
    version: str
    digest: str = Field(pattern=DIGEST_PATTERN)
    task_count: int = Field(ge=0)
    owner: str
    created_at: StoredDateTime
    """In JSON in pydantic's own form (`...Z`), as `dataset` documents have always had it."""
    description: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value, "dataset")

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        return check_version(value, "dataset")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


def dataset_digest(tasks: list[tuple[str, str]]) -> str:
    """Digest of the ordered (task name, task digest) list: order is part of identity."""
    outer = hashlib.sha256()
    for name, digest in tasks:
        outer.update(f"{name}\0{digest}\n".encode())
    return f"sha256:{outer.hexdigest()}"
