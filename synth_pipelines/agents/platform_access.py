"""How an attempt's session reaches the platform, handed to it by whoever runs the attempt.

Harbor builds the agent and the judge's verifier from an import path and kwargs, and
writes those kwargs into the trial's record (`config.json`): this travels among them,
with the control database's URL, which may hold a password, written masked.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, SecretStr
from sqlalchemy import Engine

from synth_pipelines.config import Settings
from synth_pipelines.control.database import engine_for


class PlatformAccess(BaseModel):
    """The capture proxy (its URL for operators, its listener for sandboxes), the key an
    attempt's token is signed with, the owner evidence is flushed as, and the control
    database the token is revoked and the model route checked in."""

    model_config = ConfigDict(frozen=True)

    proxy_url: str
    proxy_sandbox_socket: Path
    signing_key_path: Path
    owner: str
    control_database_url: SecretStr

    @classmethod
    def of(cls, config: Settings) -> PlatformAccess:
        return cls(
            proxy_url=config.proxy_url,
            proxy_sandbox_socket=config.proxy_sandbox_socket,
            signing_key_path=config.signing_key_path,
            owner=config.owner,
            control_database_url=SecretStr(config.control_database_url),
        )

    def control_engine(self) -> Engine:
        return engine_for(self.control_database_url.get_secret_value())
