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


@contextmanager
def s3_gateway(s3_server: Any, bucket: str, patch: Any) -> Iterator[Gateway]:
    """The gateway over an S3 object store (moto's server, a fresh `bucket` in it), as a
    production one is, with this process holding the store's credentials."""
    from tests.production_services import S3_CREDENTIALS

    for name, value in S3_CREDENTIALS.items():
        patch.setenv(name, value)
    created = s3_server.create_bucket(bucket)
    settings = Settings()
    engine = control_engine(settings)
    create_tables(engine)
    config = replace(
        gateway_config(settings),
        objects_url=f"s3://{created}/platform",
        s3_endpoint_url=s3_server.endpoint_url,
    )
    with serving(create_app(config)) as url:
        yield Gateway(url, engine, config.key_secret)
