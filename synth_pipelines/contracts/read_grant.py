"""Read grants: how an operator's bulk data (a run's exported table) leaves the platform
without passing through the gateway's memory.

A grant (`ReadGrant`) is a URL the object's bytes are fetched from once the gateway has
checked that the object is under one of the key owner's runs: the object store's own
presigned GET, or the gateway's `GET /v1/downloads/{grant}` streaming a local store's file.
The signed claims (`ReadClaims`) travel in the latter's URL, so it needs no API key.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from synth_pipelines.contracts.object_claims import ObjectClaims


class ReadClaims(ObjectClaims):
    """What a read grant allows: its owner may read the object."""


class ReadGrant(BaseModel):
    key: str
    sha256: str
    """What the downloaded bytes must hash to: the reader checks it."""
    size: int
    url: str
    """Where to GET the bytes, without the API key."""
    expires_at: datetime
