"""Upload grants: how a dataset's task packages reach the object store without passing
through the gateway's memory.

An operator asks for grants (`GrantRequest`), one per package; each (`PackageGrant`) is a
URL the package's bytes are PUT to, create-only and bound to their SHA-256, with the
signed claims (`GrantClaims`) the commit (`DatasetCommit`) hands back, so the version
recorded is exactly what was granted, to whom it was granted.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from synth_pipelines.contracts.dataset import DIGEST_PATTERN
from synth_pipelines.contracts.object_claims import ObjectClaims

SHA256_PATTERN = r"^[0-9a-f]{64}$"


class PackageToUpload(BaseModel):
    """One task's package, as the operator packed it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    digest: str = Field(pattern=DIGEST_PATTERN, description="Harbor's content digest.")
    sha256: str = Field(pattern=SHA256_PATTERN, description="The package archive's SHA-256.")
    size: int = Field(ge=0, description="The package archive's length in bytes.")


class GrantRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    version: str
    tasks: list[PackageToUpload] = Field(min_length=1, max_length=100_000)


class GrantClaims(ObjectClaims):
    """What an upload grant allows: its owner may store the object once, with exactly
    its bytes, as the task `task` (Harbor digest `digest`) of the dataset `dataset`."""

    dataset: str
    task: str
    digest: str


class PackageGrant(BaseModel):
    task: str
    key: str
    sha256: str
    size: int
    url: str | None
    """Where to PUT the package; None when the store already holds it with its SHA-256."""
    headers: dict[str, str]
    """Headers the PUT must carry as given (signed into the URL of an S3 store)."""
    grant: str
    """The signed claims, handed back at commit."""
    expires_at: datetime


class UploadGrants(BaseModel):
    published: bool
    """The version is already recorded with this content: nothing needs uploading."""
    grants: list[PackageGrant]


class StoredPackage(BaseModel):
    """A package the gateway received for a grant and stored."""

    key: str
    sha256: str
    size: int


class DatasetCommit(BaseModel):
    """Record a version from its grants, in task order, once their packages are stored."""

    model_config = ConfigDict(extra="forbid")

    name: str
    version: str
    description: str = Field(default="", max_length=10_000)
    grants: list[str] = Field(min_length=1, max_length=100_000)
