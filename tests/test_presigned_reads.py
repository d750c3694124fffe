"""Bulk data leaves through read grants, never through the gateway's memory: a grant is
issued only for an object under one of the key owner's runs, is signed and short-lived,
and its bytes are the stored bytes, from the gateway's stream of a local store's file or
from an S3 store's own presigned GET."""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gateway.read_grants import sign_read, verify_read
from gateway.server import gateway_config
from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.contracts.read_grant import ReadClaims, ReadGrant
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import record_event
from synth_pipelines.control.table_outputs import store_table
from synth_pipelines.storage.objectstore import LocalObjectStore, open_object_store, sha256_hex
from tests.gateway_process import gateway_process, peak_rss
from tests.gateway_support import Gateway, bearer, gateway, s3_gateway
from tests.learning_records import outcome


def _export(url: str, key: str, run_id: str, what: str = "outcomes") -> httpx.Response:
    return httpx.post(
        f"{url}/v1/runs/{run_id}/exports",
        json={"what": what, "format": "parquet"},
        headers=bearer(key),
        timeout=60,
    )


def _granted(url: str, key: str, run_id: str) -> ReadGrant:
    answered = _export(url, key, run_id)
    assert answered.status_code == 200, answered.text
    return ReadGrant.model_validate(answered.json()["download"])


def _exports_of(run: RunRecord) -> list[str]:
    return list(open_object_store(Settings().objects_url).list(f"runs/{run.run_id}/exports/"))


@pytest.fixture
def served(state: Path) -> Iterator[Gateway]:
    with gateway() as running:
        yield running


def test_no_grant_is_issued_for_another_owners_run(served: Gateway):
    alice, bob = served.key("alice"), served.key("bob")
    run = served.run("alice")
    refused, unknown = _export(served.url, bob, run.run_id), _export(served.url, bob, "r-none")
    assert refused.status_code == unknown.status_code == 404, refused.text
    # Said exactly as for a run that does not exist: the refusal tells nothing of alice's.
    message = refused.json()["error"]["message"]
    assert message == unknown.json()["error"]["message"].replace("r-none", run.run_id)
    assert _exports_of(run) == []
    grant = _granted(served.url, alice, run.run_id)
    assert grant.key.startswith(f"runs/{run.run_id}/exports/")
    assert grant.expires_at - datetime.now(UTC) <= timedelta(minutes=5)


def test_an_expired_or_altered_read_grant_is_refused(served: Gateway):
    alice = served.key("alice")
    run = served.run("alice")
    grant = _granted(served.url, alice, run.run_id)
    token = grant.url.rsplit("/", 1)[1]
    claims = verify_read(served.key_secret, token)
    assert claims.owner == "alice" and claims.key == grant.key
    expired = sign_read(
        served.key_secret, claims.model_copy(update={"expires_at": datetime.now(UTC)})
    )
    other = claims.model_copy(update={"key": f"runs/{run.run_id}/trials/other.tar.gz"})
    payload = base64.urlsafe_b64encode(other.model_dump_json().encode()).decode().rstrip("=")
    altered = f"{payload}.{token.split('.')[1]}"
    resigned = sign_read(secrets.token_bytes(32), other)
    downloads = grant.url.removesuffix(token)
    for bad, why in ((expired, "expired"), (altered, "signature"), (resigned, "signature")):
        refused = httpx.get(downloads + bad, timeout=30)
        assert refused.status_code == 403 and why in refused.text, refused.text
    assert httpx.get(grant.url, timeout=30).status_code == 200


def test_a_downloaded_export_is_the_stored_object(cli_gateway, tmp_path: Path):
    settings = Settings()
    run = Gateway(cli_gateway.url, control_engine(settings), b"").run(settings.owner)
    out = tmp_path / "outcomes.parquet"
    exported = CliRunner().invoke(
        app, ["run", "export", run.run_id, "--what", "outcomes", "--out", str(out), "--json"]
    )
    assert exported.exit_code == 0, exported.output
    (key,) = _exports_of(run)
    stored = open_object_store(settings.objects_url).measure(key)
    assert stored is not None and stored.size == out.stat().st_size
    assert hashlib.sha256(out.read_bytes()).hexdigest() == stored.sha256


def test_bob_neither_exports_nor_shows_alices_attempts(served: Gateway):
    alice, bob = served.key("alice"), served.key("bob")
    run = served.run("alice")
    attempt = f"{run.run_id}.b0.t0.a0"
    record_event(
        served.engine, run.run_id, "attempt.finished", {"attempt_id": attempt, "batch": "b0"}
    )

    def show(key: str, wanted: str) -> httpx.Response:
        return httpx.get(f"{served.url}/v1/attempts/{wanted}", headers=bearer(key), timeout=30)

    refused, unknown = show(bob, attempt), show(bob, "no-such-attempt")
    assert refused.status_code == unknown.status_code == 404
    message = refused.json()["error"]["message"]
    assert message == unknown.json()["error"]["message"].replace("no-such-attempt", attempt)
    # Alice's own attempt is found; it has no trial record in this made-up batch.
    found = show(alice, attempt)
    assert found.status_code == 404 and "no trial record" in found.text, found.text
    assert _export(served.url, bob, run.run_id).status_code == 404


def test_an_s3_read_grant_is_a_presigned_get_of_the_stored_bytes(state, s3_server, monkeypatch):
    with s3_gateway(s3_server, "reads", monkeypatch) as served:
        url = served.url
        alice, bob = served.key("alice"), served.key("bob")
        run = served.run("alice")
        assert _export(url, bob, run.run_id).status_code == 404
        grant = _granted(url, alice, run.run_id)
    params = httpx.URL(grant.url).params
    assert params["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256" and int(params["X-Amz-Expires"]) <= 300
    body = httpx.get(grant.url, timeout=30).content
    assert (len(body), sha256_hex(body)) == (grant.size, grant.sha256)


# A 50 MB object, through a gateway in its own process.

OBJECT_MB = 50
GROWTH_LIMIT_MB = 20


def _stored_object(run: RunRecord, name: str, megabytes: int) -> ReadClaims:
    """An object of `megabytes` random bytes under the run, and the claims of its grant."""
    store = open_object_store(Settings().objects_url)
    assert isinstance(store, LocalObjectStore)
    incoming = store.incoming(f"runs/{run.run_id}/exports/{name}")
    digest = hashlib.sha256()
    try:
        for _ in range(megabytes):
            chunk = os.urandom(1 << 20)
            digest.update(chunk)
            incoming.write(chunk)
        stored = incoming.publish(digest.hexdigest())
    finally:
        incoming.discard()
    return ReadClaims(
        owner=run.owner,
        key=stored.key,
        sha256=stored.sha256,
        size=stored.size,
        expires_at=datetime.now(UTC) + timedelta(minutes=5),
    )


def _download(url: str) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with httpx.stream("GET", url, timeout=120) as response:
        assert response.status_code == 200, response.read()
        for chunk in response.iter_bytes(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


@pytest.mark.slow
def test_a_50_mb_object_downloads_while_the_gateways_memory_stays_bounded(state, monkeypatch):
    with gateway_process(monkeypatch) as process:
        settings = Settings()
        run = Gateway("", control_engine(settings), b"").run(settings.owner)
        secret = gateway_config(settings).key_secret
        downloads = f"{os.environ['SYNTH_GATEWAY_URL']}/v1/downloads/"
        small, large = _stored_object(run, "small", 1), _stored_object(run, "large", OBJECT_MB)
        # A first download brings in what any download needs, so the measured growth
        # is the large object's alone.
        assert _download(downloads + sign_read(secret, small))[1] == small.sha256
        with peak_rss(process) as peak:
            before = process.memory_info().rss
            size, sha256 = _download(downloads + sign_read(secret, large))
    assert (size, sha256) == (OBJECT_MB << 20, large.sha256)
    growth_mb = (peak[0] - before) / (1 << 20)
    assert growth_mb < GROWTH_LIMIT_MB, f"the gateway grew by {growth_mb:.0f} MB"


EXPORT_ROWS = 25_000
"""Rows of a run's outcomes, each with 4 KB of text no codec shrinks much: an export of
some 75 MB, three times what the gateway may grow by."""


def _large_outcomes(run: RunRecord) -> None:
    settings = Settings()
    template = outcome("a0").model_dump()
    rows = [
        TrialOutcome(
            **template
            | {
                "run_id": run.run_id,
                "batch": batch_key(run.run_id, 0),
                "attempt_id": f"{run.run_id}.b0.t0.a{index}",
                "exception_message": base64.b64encode(os.urandom(3072)).decode(),
            }
        )
        for index in range(EXPORT_ROWS)
    ]
    store_table(
        control_engine(settings),
        open_object_store(settings.objects_url),
        "trials",
        batch_key(run.run_id, 0),
        TrialOutcome.to_table(rows),
    )


@pytest.mark.slow
def test_a_large_export_is_built_outside_the_gateways_memory(state, monkeypatch):
    with gateway_process(monkeypatch) as process:
        settings = Settings()
        engine = control_engine(settings)
        small, large = (
            Gateway("", engine, b"").run(settings.owner),
            Gateway("", engine, b"").run(settings.owner),
        )
        _large_outcomes(large)
        key = settings.operator_key_path.read_text().strip()
        url = os.environ["SYNTH_GATEWAY_URL"]
        # A first export brings in what any export needs, so the measured growth is the
        # large one's alone.
        assert _export(url, key, small.run_id).status_code == 200
        with peak_rss(process) as peak:
            before = process.memory_info().rss
            answered = _export(url, key, large.run_id)
    assert answered.status_code == 200, answered.text
    assert answered.json()["rows"] == EXPORT_ROWS
    grant = ReadGrant.model_validate(answered.json()["download"])
    assert grant.size > 3 * (GROWTH_LIMIT_MB << 20)
    stored = open_object_store(settings.objects_url).measure(grant.key)
    assert stored is not None and (stored.size, stored.sha256) == (grant.size, grant.sha256)
    growth_mb = (peak[0] - before) / (1 << 20)
    assert growth_mb < GROWTH_LIMIT_MB, f"the gateway grew by {growth_mb:.0f} MB"
