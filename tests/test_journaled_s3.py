"""The production deployment's S3-compatible server keeps its buckets across a restart,
a crash included, and still refuses a second write of a key (create-only)."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from synth_pipelines.services.journaled_s3 import WRITES
from synth_pipelines.storage.objectstore import ObjectExistsError, S3ObjectStore, sha256_hex
from tests.production_services import free_port, moto_process


@contextmanager
def journaled_server(journal: Path, port: int) -> Iterator[str]:
    """The server as the deployment runs it; killed outright (SIGKILL) on leaving."""
    argv = [
        *(sys.executable, "-m", "synth_pipelines.services.journaled_s3"),
        *("--port", str(port), "--journal", str(journal)),
    ]
    with moto_process(argv, port, signal.SIGKILL) as endpoint:
        yield endpoint


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "synth",
        "AWS_SECRET_ACCESS_KEY": "synth",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    # The server accepts only these: boto3's default session, which keeps the credentials it
    # first read, is made anew to read them.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)


def test_objects_survive_a_crash_and_keys_stay_create_only(tmp_path: Path, s3_env: None):
    journal, port = tmp_path / "journal.jsonl", free_port()
    objects = {f"evidence/chunk-{i}": os.urandom(1000 + i) for i in range(20)}
    big = os.urandom(9 << 20)  # over boto3's multipart threshold, as Dagster's logs may be
    with journaled_server(journal, port) as endpoint:
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="synth")
        store = S3ObjectStore("synth", "platform", endpoint_url=endpoint)
        refs = {key: store.put(key, data) for key, data in objects.items()}
        store.put("runs/gone", b"deleted later")
        client.delete_object(Bucket="synth", Key="platform/runs/gone")
        client.upload_fileobj(io.BytesIO(big), "synth", "dagster/logs/big")
        assert store.get("evidence/chunk-3") == objects["evidence/chunk-3"]
    recorded = journal.read_text().splitlines()
    writes = [line for line in recorded if json.loads(line)["method"] in WRITES]
    assert len(writes) < len(recorded)  # the reads were recorded too

    with journaled_server(journal, port) as endpoint:
        store = S3ObjectStore("synth", "platform", endpoint_url=endpoint)
        assert sorted(store.list("")) == sorted(objects)
        for key, ref in refs.items():
            assert store.get(key, expected_sha256=ref.sha256) == objects[key]
        client = boto3.client("s3", endpoint_url=endpoint)
        logged = client.get_object(Bucket="synth", Key="dagster/logs/big")["Body"].read()
        assert sha256_hex(logged) == sha256_hex(big)
        # Create-only after the replay as before it: the same bytes again are a retry,
        # other bytes under a key are refused by the server.
        store.put("evidence/chunk-0", objects["evidence/chunk-0"])
        with pytest.raises(ObjectExistsError):
            store.put("evidence/chunk-0", b"other bytes")
        with pytest.raises(ClientError, match="PreconditionFailed"):
            client.put_object(
                Bucket="synth", Key="platform/evidence/chunk-1", Body=b"x", IfNoneMatch="*"
            )

    # Replaying dropped the reads from the journal, and kept the writes in their order.
    assert journal.read_text().splitlines()[: len(writes)] == writes
