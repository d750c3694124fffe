"""A real gateway under uvicorn for tests, with keys and runs made straight in its database."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Engine

from gateway.app import create_app
from gateway.server import gateway_config
from synth_pipelines.config import Settings
from synth_pipelines.contracts.operator_key import KeyRequest, Role
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest
from synth_pipelines.control.database import control_engine, create_tables
from synth_pipelines.control.operator_keys import create_key
from synth_pipelines.control.runs import accept_run
from synth_pipelines.tinker_local.server import serving
from tests.agent_runs import profile_document


@dataclass(frozen=True)
class Gateway:
    url: str
    engine: Engine
    key_secret: bytes

    def key(self, owner: str, role: Role = "operator", org: str = "lab", **more: int) -> str:
        """A new key's whole secret, made as an admin would."""
        request = KeyRequest(owner=owner, org=org, role=role, **more)
        return create_key(self.engine, self.key_secret, request).secret

    def run(self, owner: str, org: str = "lab") -> RunRecord:
        """An accepted evaluation of `owner`'s, in `org`."""
        request = RunRequest(
            owner=owner,
            dataset=DatasetPin(name="test/one", version="v1", digest="0" * 64, task_count=1),
            actor=PinnedProfile.from_document(profile_document("oracle.json")),
            plan={"kind": "eval"},
        )
        return accept_run(self.engine, request, org=org)[0]


@contextmanager
def gateway(proxy_url: str = "http://proxy.invalid", **config: Any) -> Iterator[Gateway]:
    """The gateway on a free loopback port, over the test's control database, minting
    session tokens with the state directory's signing key for the proxy at `proxy_url`;
    `config` sets other fields of its `GatewayConfig` (a real `dagster_url`)."""
    settings = Settings()
    engine = control_engine(settings)
    create_tables(engine)
    key_secret = secrets.token_bytes(32)
    settled = replace(
        gateway_config(settings),
        key_secret=key_secret,
        dagster_url="http://dagster.invalid",
        proxy_url=proxy_url,
    )
    app = create_app(replace(settled, **config))
    with serving(app) as url:
        yield Gateway(url, engine, key_secret)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}
