"""Task packages reach the object store through upload grants, never through the gateway's
memory: a grant is signed, short-lived, bound to its owner, its object, its SHA-256 and its
size, and uploads once; the commit records a version only from its owner's grants whose
objects are stored with their granted bytes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gateway.upload_grants import sign_grant
from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.contracts.upload_grant import GrantClaims
from synth_pipelines.control.database import control_engine
from synth_pipelines.registry.datasets import get_dataset, read_page
from synth_pipelines.storage.objectstore import open_object_store, sha256_hex
from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET
from tests.dagster_services import SYNTH
from tests.gateway_process import gateway_process, peak_rss
from tests.gateway_support import Gateway, bearer, gateway, s3_gateway

DATASET = {"name": "t/grants", "version": "v1"}


def _task(name: str, data: bytes) -> dict[str, object]:
    """A package as the CLI describes it: its Harbor digest (any, here), SHA-256 and size."""
    digest = f"sha256:{hashlib.sha256(name.encode()).hexdigest()}"
    return {"name": name, "digest": digest, "sha256": sha256_hex(data), "size": len(data)}


def _grants(url: str, key: str, *tasks: dict[str, object]) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/datasets/grants", headers=bearer(key), json={**DATASET, "tasks": list(tasks)}
    )


def _granted(url: str, key: str, *tasks: dict[str, object]) -> list[dict]:
    response = _grants(url, key, *tasks)
    assert response.status_code == 200, response.text
    return response.json()["grants"]


def _commit(url: str, key: str, *grants: str) -> httpx.Response:
    # The first version a gateway records brings in Dagster, to report it: seconds.
    return httpx.post(
        f"{url}/v1/datasets",
        headers=bearer(key),
        json={**DATASET, "grants": list(grants)},
        timeout=120,
    )


def _put(grant: dict, data: bytes) -> httpx.Response:
    return httpx.put(grant["url"], content=data, headers=grant["headers"], timeout=60)


def _datasets(url: str, key: str) -> list[dict]:
    return httpx.get(f"{url}/v1/datasets", headers=bearer(key)).json()


def _objects(state: Path) -> list[Path]:
    """Every file in the local object store, temporary ones included."""
    root = state / "objects"
    return sorted(path for path in root.rglob("*") if path.is_file()) if root.exists() else []


@pytest.fixture
def served(state: Path) -> Iterator[Gateway]:
    with gateway() as running:
        yield running


def test_a_grant_uploads_once(served: Gateway, state: Path):
    alice = served.key("alice")
    data = secrets.token_bytes(4096)
    (grant,) = _granted(served.url, alice, _task("one", data))
    assert _put(grant, data).status_code == 201
    again = _put(grant, secrets.token_bytes(4096))
    assert again.status_code == 409, again.text
    assert "already exists" in again.json()["error"]["message"]
    assert open_object_store(Settings().objects_url).get(grant["key"]) == data
    committed = _commit(served.url, alice, grant["grant"])
    assert committed.status_code == 200, committed.text
    assert (committed.json()["owner"], committed.json()["created"]) == ("alice", True)


def test_bytes_that_do_not_match_the_grant_are_refused_and_nothing_is_recorded(
    served: Gateway, state: Path
):
    alice = served.key("alice")
    data = secrets.token_bytes(4096)
    (grant,) = _granted(served.url, alice, _task("one", data))
    for wrong in (secrets.token_bytes(4096), data[:-1], data + b"!"):
        refused = _put(grant, wrong)
        assert refused.status_code == 400, refused.text
    assert "not the" in _put(grant, secrets.token_bytes(4096)).json()["error"]["message"]
    assert _objects(state) == []  # neither the object nor a temporary file
    missing = _commit(served.url, alice, grant["grant"])
    assert missing.status_code == 400 and "not in the object store" in missing.text
    assert _datasets(served.url, alice) == []


def test_an_expired_or_tampered_grant_is_refused(served: Gateway, state: Path):
    alice = served.key("alice")
    data = secrets.token_bytes(1024)
    (grant,) = _granted(served.url, alice, _task("one", data))
    payload, signature = grant["grant"].split(".")
    padded = payload + "=" * (-len(payload) % 4)
    claims = GrantClaims.model_validate_json(base64.urlsafe_b64decode(padded))
    expired = sign_grant(
        served.key_secret, claims.model_copy(update={"expires_at": datetime.now(UTC)})
    )
    other = claims.model_copy(update={"sha256": sha256_hex(b"other"), "size": 5})
    forged_payload = base64.urlsafe_b64encode(other.model_dump_json().encode()).decode()
    forged = f"{forged_payload.rstrip('=')}.{signature}"
    resigned = sign_grant(secrets.token_bytes(32), other)
    uploads = grant["url"].removesuffix(grant["grant"])
    for bad, why in ((expired, "expired"), (forged, "signature"), (resigned, "signature")):
        refused = httpx.put(uploads + bad, content=b"other" if bad != expired else data)
        assert refused.status_code == 403 and why in refused.text, refused.text
        assert _commit(served.url, alice, bad).status_code == 403
    assert _objects(state) == []
    assert _datasets(served.url, alice) == []


def test_bob_cannot_commit_alices_grant(served: Gateway):
    alice, bob = served.key("alice"), served.key("bob")
    data = secrets.token_bytes(1024)
    (grant,) = _granted(served.url, alice, _task("one", data))
    assert _put(grant, data).status_code == 201
    refused = _commit(served.url, bob, grant["grant"])
    assert refused.status_code == 403 and "another owner" in refused.text
    assert _datasets(served.url, bob) == []
    assert _commit(served.url, alice, grant["grant"]).json()["owner"] == "alice"


def test_commit_refuses_a_missing_object(served: Gateway, state: Path):
    alice = served.key("alice")
    present, absent = secrets.token_bytes(512), secrets.token_bytes(512)
    first, second = _granted(served.url, alice, _task("one", present), _task("two", absent))
    assert _put(first, present).status_code == 201
    refused = _commit(served.url, alice, first["grant"], second["grant"])
    assert refused.status_code == 400, refused.text
    assert "task two" in refused.text and "not in the object store" in refused.text
    assert _datasets(served.url, alice) == []


def test_a_package_the_store_holds_needs_no_upload(served: Gateway):
    alice = served.key("alice")
    data = secrets.token_bytes(512)
    (grant,) = _granted(served.url, alice, _task("one", data))
    assert _put(grant, data).status_code == 201
    (again,) = _granted(served.url, alice, _task("one", data))
    assert again["url"] is None


def test_a_viewer_key_cannot_publish(cli_gateway, state: Path, tmp_path: Path):
    viewer = cli_gateway.act_as("vera", role="viewer")
    data = secrets.token_bytes(512)
    refused = _grants(cli_gateway.url, viewer, _task("one", data))
    assert refused.status_code == 403, refused.text
    operator = cli_gateway.key("olga")
    (grant,) = _granted(cli_gateway.url, operator, _task("one", data))
    assert _commit(cli_gateway.url, viewer, grant["grant"]).status_code == 403
    shutil.copytree(SAMPLE_DATASET / "write-robots-txt", tmp_path / "one" / "write-robots-txt")
    published = CliRunner().invoke(
        app, ["dataset", "publish", str(tmp_path / "one"), "--name", "t/one", "--version", "v1"]
    )
    assert published.exit_code == 2 and "role operator" in published.stderr, published.stderr
    assert _objects(state) == []
    assert _datasets(cli_gateway.url, viewer) == []


@pytest.fixture(name="s3_gateway")
def s3_gateway_fixture(state: Path, s3_server, monkeypatch) -> Iterator[Gateway]:
    with s3_gateway(s3_server, "grants", monkeypatch) as served:
        yield served


def test_an_s3_grant_is_a_presigned_create_only_put_bound_to_the_sha256(s3_gateway: Gateway):
    alice = s3_gateway.key("alice")
    data, other = secrets.token_bytes(2048), secrets.token_bytes(2048)
    first, second = _granted(s3_gateway.url, alice, _task("one", data), _task("two", other))
    signed = httpx.URL(first["url"]).params["X-Amz-SignedHeaders"].split(";")
    assert {"if-none-match", "x-amz-checksum-sha256"} <= set(signed)
    assert _put(first, data).status_code == 200
    again = _put(first, data)
    assert again.status_code == 412, again.text  # If-None-Match: *, create-only
    # moto stores a declared checksum without checking it: the commit hashes what is stored.
    assert _put(second, data).status_code == 200
    refused = _commit(s3_gateway.url, alice, first["grant"], second["grant"])
    assert refused.status_code == 400 and "task two" in refused.text, refused.text
    assert _datasets(s3_gateway.url, alice) == []


# A 200 MB package, through a gateway in its own process.

PACKAGE_MB = 200
GROWTH_LIMIT_MB = 50


def _publish(directory: Path, name: str) -> dict:
    result = subprocess.run(
        [*SYNTH, "dataset", "publish", str(directory), "--name", name, "--version", "v1", "--json"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow
def test_a_200_mb_package_never_sits_in_the_gateways_memory(
    state: Path, tmp_path: Path, monkeypatch
):
    small = tmp_path / "small"
    shutil.copytree(SAMPLE_DATASET / "write-robots-txt", small / "write-robots-txt")
    large = tmp_path / "large" / "large-task"
    shutil.copytree(SAMPLE_DATASET / "write-robots-txt", large)
    with (large / "environment" / "payload.bin").open("wb") as payload:
        for _ in range(PACKAGE_MB):
            payload.write(os.urandom(1 << 20))  # incompressible: the package stays 200 MB
    with gateway_process(monkeypatch) as process:
        # A first publish brings in what any commit needs (the Dagster report), so the
        # measured growth is the large package's alone.
        _publish(small, "t/small")
        with peak_rss(process) as peak:
            before = process.memory_info().rss
            published = _publish(tmp_path / "large", "t/large")
    assert published["created"] and published["owner"] == Settings().owner
    (task,) = _tasks_of(published)
    stored = open_object_store(Settings().objects_url).measure(task["package_key"])
    assert stored is not None and stored.size > PACKAGE_MB << 20
    assert stored.sha256 == task["package_sha256"]
    growth_mb = (peak[0] - before) / (1 << 20)
    assert growth_mb < GROWTH_LIMIT_MB, f"the gateway grew by {growth_mb:.0f} MB"


def _tasks_of(published: dict) -> list[dict]:
    engine = control_engine(Settings())
    dataset = get_dataset(engine, published["ref"])
    return [task.model_dump() for task in read_page(engine, dataset, 0, dataset.task_count)]


def test_grants_expire_soon(served: Gateway):
    alice = served.key("alice")
    (grant,) = _granted(served.url, alice, _task("one", b"x"))
    expires_at = datetime.fromisoformat(grant["expires_at"])
    assert expires_at - datetime.now(UTC) <= timedelta(minutes=15)
