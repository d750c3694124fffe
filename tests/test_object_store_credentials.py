"""The deployment's S3-compatible server serves only requests signed with the deployment's
key pair, in the header or in a presigned URL; every other request is refused with S3's
403 and changes nothing, not even after a restart. What the object store relies on
(create-only writes, the SHA-256 checksum) still holds, and a restart brings every object
back."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore import UNSIGNED
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from synth_pipelines.services.production import (
    BUCKET,
    LOCAL_SERVERS,
    S3,
    ProductionLayout,
    create_bucket,
    deployment_environment,
    server_services,
)
from synth_pipelines.services.supervisor import Service, start, stop
from synth_pipelines.storage.objectstore import ObjectExistsError, S3ObjectStore, sha256_hex
from tests.conftest import PROJECT_ROOT

IMAGE = {"SYNTH_PROJECT_IMAGE": "synth-pipelines:a", "DOCKER_HOST": "unix:///d.sock"}
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
REGION = "us-east-1"


@dataclass
class DeploymentBucket:
    """The deployment's own S3 server, started as `synth up --production` starts it."""

    layout: ProductionLayout
    values: dict[str, str]
    service: Service

    @property
    def endpoint(self) -> str:
        return self.values["SYNTH_S3_ENDPOINT_URL"]

    def start(self) -> None:
        # Nothing inherited: the key pair the server accepts is the one its service hands it.
        with pytest.MonkeyPatch.context() as patch:
            for name in CREDENTIAL_VARIABLES:
                patch.delenv(name, raising=False)
            start(self.layout.root, self.service, cwd=PROJECT_ROOT)

    def restart(self) -> None:
        assert stop(self.layout.root, self.service)
        self.start()

    def client(self, key: str | None = None, secret: str | None = None, **config: Any) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=key or self.values["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=secret or self.values["AWS_SECRET_ACCESS_KEY"],
            region_name=REGION,
            config=Config(**config),
        )

    def store(self) -> S3ObjectStore:
        """The platform's object store, configured from the environment as its processes are."""
        return S3ObjectStore(BUCKET, "platform", endpoint_url=self.endpoint)


@pytest.fixture
def bucket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DeploymentBucket]:
    layout = ProductionLayout.under(tmp_path)
    values = deployment_environment(layout, {}, IMAGE, 1)
    values[LOCAL_SERVERS] = S3  # the bucket's server alone; no PostgreSQL needed here
    (service,) = server_services(layout, values)
    deployment = DeploymentBucket(layout, values, service)
    deployment.start()
    try:
        for name in (*CREDENTIAL_VARIABLES, "AWS_DEFAULT_REGION"):
            monkeypatch.setenv(name, values[name])
        # boto3's default session keeps the credentials it first read: a new one reads this
        # deployment's, and the one before is back afterwards.
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
        create_bucket(values)
        yield deployment
    finally:
        stop(layout.root, service)


def signed_put(
    bucket: DeploymentBucket, key: str, signed_body: bytes, sent_body: bytes, at: datetime
) -> httpx.Response:
    """A PUT signed with the deployment's key pair for `signed_body` at time `at`, sent with
    `sent_body`: what a request captured on the wire and altered or replayed looks like."""
    stamp = at.strftime("%Y%m%dT%H%M%SZ")
    request = AWSRequest(
        method="PUT",
        url=f"{bucket.endpoint}/{BUCKET}/{key}",
        headers={"x-amz-content-sha256": sha256_hex(signed_body), "x-amz-date": stamp},
    )
    request.context["timestamp"] = stamp
    credentials = Credentials(
        bucket.values["AWS_ACCESS_KEY_ID"], bucket.values["AWS_SECRET_ACCESS_KEY"]
    )
    auth = S3SigV4Auth(credentials, "s3", REGION)
    signature = auth.signature(
        auth.string_to_sign(request, auth.canonical_request(request)), request
    )
    signed_headers = auth.signed_headers(auth.headers_to_sign(request))
    authorization = (
        f"AWS4-HMAC-SHA256 Credential={auth.scope(request)}, "
        f"SignedHeaders={signed_headers}, Signature={signature}"
    )
    return httpx.put(
        request.url,
        content=sent_body,
        headers={**dict(request.headers), "Authorization": authorization},
    )


def refusal_code(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/xml")
    return response.text.split("<Code>", 1)[1].split("</Code>", 1)[0]


def test_the_deployments_key_pair_writes_and_reads_create_only_and_checksummed(
    bucket: DeploymentBucket,
):
    store = bucket.store()
    ref = store.put("evidence/a", b"first")
    assert store.get("evidence/a", expected_sha256=ref.sha256) == b"first"
    assert list(store.list("evidence")) == ["evidence/a"]
    # The signature covers the path as sent: keys that need encoding verify as well.
    awkward = "named/a b+c=d~é,(1)"
    store.put(awkward, b"awkward")
    assert store.get(awkward) == b"awkward"
    store.put("evidence/a", b"first")  # the same bytes again: an idempotent retry
    with pytest.raises(ObjectExistsError):
        store.put("evidence/a", b"other bytes")
    client = bucket.client()
    with pytest.raises(ClientError, match="PreconditionFailed"):
        client.put_object(Bucket=BUCKET, Key="platform/evidence/a", Body=b"x", IfNoneMatch="*")
    # A body that is not the one its checksum names is refused by the server.
    wrong = hashlib.sha256(b"not the body").digest()
    with pytest.raises(ClientError) as refused:
        client.put_object(
            Bucket=BUCKET,
            Key="platform/evidence/b",
            Body=b"the body",
            ChecksumSHA256=base64.b64encode(wrong).decode(),
        )
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert store.head("evidence/b") is None


@pytest.mark.parametrize(
    ("who", "code"),
    [
        ("no credentials", "AccessDenied"),
        ("a wrong secret", "SignatureDoesNotMatch"),
        ("an unknown key", "InvalidAccessKeyId"),
    ],
)
def test_requests_not_signed_with_the_deployments_key_pair_are_refused_and_change_nothing(
    bucket: DeploymentBucket, who: str, code: str
):
    store = bucket.store()
    ref = store.put("evidence/a", b"the owner's evidence")
    outsider = {
        "no credentials": bucket.client(signature_version=UNSIGNED),
        "a wrong secret": bucket.client(secret="not-the-deployments-secret"),
        "an unknown key": bucket.client(key="someone-else"),
    }[who]
    attempts = {
        "overwrite": lambda: outsider.put_object(
            Bucket=BUCKET, Key="platform/evidence/a", Body=b"forged"
        ),
        "write": lambda: outsider.put_object(Bucket=BUCKET, Key="platform/evidence/new", Body=b"x"),
        "delete": lambda: outsider.delete_object(Bucket=BUCKET, Key="platform/evidence/a"),
        "read": lambda: outsider.get_object(Bucket=BUCKET, Key="platform/evidence/a"),
        "list": lambda: outsider.list_objects_v2(Bucket=BUCKET),
        "new bucket": lambda: outsider.create_bucket(Bucket="outsiders"),
    }
    for name, attempt in attempts.items():
        with pytest.raises(ClientError) as refused:
            attempt()
        error = refused.value.response
        assert error["ResponseMetadata"]["HTTPStatusCode"] == 403, name
        assert error["Error"]["Code"] == code, name

    def unchanged() -> None:
        assert store.get("evidence/a", expected_sha256=ref.sha256) == b"the owner's evidence"
        assert list(store.list("")) == ["evidence/a"]
        assert [b["Name"] for b in bucket.client().list_buckets()["Buckets"]] == [BUCKET]

    unchanged()
    bucket.restart()  # nothing refused was written to the journal either
    unchanged()


def test_mocks_management_api_is_refused_however_it_is_asked(bucket: DeploymentBucket):
    store = bucket.store()
    store.put("evidence/a", b"kept")
    for method, path in (("POST", "/moto-api/reset"), ("GET", "/moto-api/data.json")):
        response = httpx.request(method, f"{bucket.endpoint}{path}")
        assert (response.status_code, refusal_code(response)) == (403, "AccessDenied")
    assert store.get("evidence/a") == b"kept"


def test_a_signed_request_carrying_other_bytes_or_signed_long_ago_is_refused(
    bucket: DeploymentBucket,
):
    now = datetime.now(UTC)
    accepted = signed_put(bucket, "platform/evidence/a", b"signed", b"signed", now)
    assert accepted.status_code == 200, accepted.text
    altered = signed_put(bucket, "platform/evidence/b", b"signed", b"altered", now)
    assert (altered.status_code, refusal_code(altered)) == (400, "XAmzContentSHA256Mismatch")
    replayed = signed_put(bucket, "platform/evidence/c", b"old", b"old", now - timedelta(hours=1))
    assert (replayed.status_code, refusal_code(replayed)) == (403, "RequestTimeTooSkewed")
    assert sorted(bucket.store().list("")) == ["evidence/a"]


def test_presigned_urls_work_only_when_made_with_the_deployments_key_pair_and_in_time(
    bucket: DeploymentBucket,
):
    bucket.store().put("evidence/a", b"shared by URL")
    params = {"Bucket": BUCKET, "Key": "platform/evidence/a"}
    owner = bucket.client(signature_version="s3v4")
    good = owner.generate_presigned_url("get_object", Params=params, ExpiresIn=300)
    answer = httpx.get(good)
    assert (answer.status_code, answer.content) == (200, b"shared by URL")

    # A create-only upload bound to its bytes' SHA-256: both headers are signed.
    data = b"uploaded by URL"
    checksum = base64.b64encode(hashlib.sha256(data).digest()).decode()
    upload = owner.generate_presigned_url(
        "put_object",
        Params={
            "Bucket": BUCKET,
            "Key": "platform/evidence/up",
            "ChecksumSHA256": checksum,
            "IfNoneMatch": "*",
        },
        ExpiresIn=300,
    )
    bound = {"If-None-Match": "*", "x-amz-checksum-sha256": checksum}
    unbound = httpx.put(upload, content=data, headers={"x-amz-checksum-sha256": checksum})
    assert (unbound.status_code, refusal_code(unbound)) == (403, "SignatureDoesNotMatch")
    other = httpx.put(upload, content=b"other bytes", headers=bound)
    assert (other.status_code, refusal_code(other)) == (400, "BadDigest")
    assert httpx.put(upload, content=data, headers=bound).status_code == 200
    assert httpx.put(upload, content=data, headers=bound).status_code == 412  # create-only
    assert bucket.store().get("evidence/up") == data

    def refused(url: str) -> str:
        response = httpx.get(url)
        assert response.status_code == 403, response.text
        return refusal_code(response)

    wrong_secret = bucket.client(secret="not-the-deployments-secret", signature_version="s3v4")
    assert refused(wrong_secret.generate_presigned_url("get_object", Params=params)) == (
        "SignatureDoesNotMatch"
    )
    unknown_key = bucket.client(key="someone-else", signature_version="s3v4")
    assert refused(unknown_key.generate_presigned_url("get_object", Params=params)) == (
        "InvalidAccessKeyId"
    )
    # The signature covers the key: the same URL for another object does not verify.
    assert refused(good.replace("evidence/a", "evidence/up")) == "SignatureDoesNotMatch"
    # Signature Version 2, what boto3 presigns with unless told otherwise, is not accepted.
    assert refused(bucket.client().generate_presigned_url("get_object", Params=params)) == (
        "AccessDenied"
    )
    short = owner.generate_presigned_url("get_object", Params=params, ExpiresIn=1)
    time.sleep(2.1)
    assert refused(short) == "AccessDenied"
    assert "expired" in httpx.get(short).text


def test_every_object_is_back_after_a_restart(bucket: DeploymentBucket):
    store = bucket.store()
    objects = {f"evidence/chunk-{i}": os.urandom(1000 + i) for i in range(20)}
    refs = {key: store.put(key, data) for key, data in objects.items()}
    store.put("runs/gone", b"deleted later")
    client = bucket.client()
    client.delete_object(Bucket=BUCKET, Key="platform/runs/gone")
    big = os.urandom(9 << 20)  # over boto3's multipart threshold, as Dagster's logs may be
    client.upload_fileobj(io.BytesIO(big), BUCKET, "dagster/logs/big")

    bucket.restart()

    assert sorted(store.list("")) == sorted(objects)
    for key, ref in refs.items():
        assert store.get(key, expected_sha256=ref.sha256) == objects[key]
    logged = client.get_object(Bucket=BUCKET, Key="dagster/logs/big")["Body"].read()
    assert sha256_hex(logged) == sha256_hex(big)
    with pytest.raises(ObjectExistsError):
        store.put("evidence/chunk-0", b"other bytes")
    with pytest.raises(ClientError):
        bucket.client(secret="not-the-deployments-secret").get_object(
            Bucket=BUCKET, Key="platform/evidence/chunk-0"
        )


def test_the_server_will_not_start_without_the_deployments_key_pair(tmp_path: Path):
    environment = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_VARIABLES}
    journal = tmp_path / "journal.jsonl"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "synth_pipelines.services.journaled_s3"),
            *("--port", "1", "--journal", str(journal)),
        ],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "AWS_SECRET_ACCESS_KEY" in done.stderr
    assert not journal.exists()
