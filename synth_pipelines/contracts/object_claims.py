"""What a grant for one stored object allows, signed by the gateway: its owner may use the
object at `key` (`size` bytes hashing to `sha256`) until `expires_at`. Upload and read
grants add what they are for (`upload_grant.py`, `read_grant.py`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict


class ObjectClaims(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    owner: str
    key: str
    sha256: str
    size: int
    expires_at: datetime
