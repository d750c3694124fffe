"""The S3 object store against an S3-compatible server running as its own process."""

import pytest

from synth_pipelines.storage.objectstore import (
    ObjectExistsError,
    ObjectIntegrityError,
    ObjectMissingError,
    file_sha256,
    open_object_store,
    sha256_hex,
)
from tests.production_services import S3_CREDENTIALS


@pytest.fixture
def bucket(s3_server, monkeypatch) -> str:
    for name, value in S3_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return s3_server.create_bucket("store")


def _store(s3_server, bucket: str, prefix: str = "platform"):
    return open_object_store(f"s3://{bucket}/{prefix}", endpoint_url=s3_server.endpoint_url)


def test_s3_store_refuses_different_bytes_under_an_existing_key(s3_server, bucket):
    store = _store(s3_server, bucket)
    store.put("runs/r-1/spec.json", b"first")
    with pytest.raises(ObjectExistsError, match="already exists with different content"):
        store.put("runs/r-1/spec.json", b"second")
    assert store.get("runs/r-1/spec.json") == b"first"


def test_s3_store_accepts_an_identical_retry(s3_server, bucket):
    store = _store(s3_server, bucket)
    first = store.put("tables/trials/b0/x.parquet", b"rows")
    assert store.put("tables/trials/b0/x.parquet", b"rows") == first
    assert store.head("tables/trials/b0/x.parquet") == first


def test_s3_store_detects_bytes_changed_behind_its_back(s3_server, bucket):
    store = _store(s3_server, bucket)
    ref = store.put("evidence/chunk.parquet", b"captured")
    s3_server.client().put_object(Bucket=bucket, Key="platform/evidence/chunk.parquet", Body=b"x")
    with pytest.raises(ObjectIntegrityError, match="changed after it was published"):
        store.get(ref.key, expected_sha256=sha256_hex(b"captured"))


def test_s3_store_reports_a_missing_key(s3_server, bucket):
    store = _store(s3_server, bucket)
    with pytest.raises(ObjectMissingError, match=r"no object 'tasks/none\.tar\.gz'"):
        store.get("tasks/none.tar.gz")
    assert store.head("tasks/none.tar.gz") is None


def test_s3_store_lists_only_keys_under_its_own_prefix(s3_server, bucket):
    store, neighbour = _store(s3_server, bucket), _store(s3_server, bucket, "other")
    store.put("runs/r-1/a", b"a")
    store.put("runs/r-1/b", b"b")
    neighbour.put("runs/r-1/c", b"c")
    assert sorted(store.list("runs/r-1")) == ["runs/r-1/a", "runs/r-1/b"]
    assert store.uri("runs/r-1/a") == f"s3://{bucket}/platform/runs/r-1/a"


def test_s3_store_puts_a_file_create_only_with_its_checksum(s3_server, bucket, tmp_path):
    store = _store(s3_server, bucket)
    source = tmp_path / "export.parquet"
    source.write_bytes(b"row" * 1_000_000)
    ref = store.put_file("runs/r-1/exports/outcomes.parquet", source, file_sha256(source))
    assert (ref.sha256, ref.size) == (sha256_hex(source.read_bytes()), 3_000_000)
    assert store.put_file(ref.key, source, ref.sha256) == ref
    source.write_bytes(b"other")
    with pytest.raises(ObjectExistsError, match="already exists with different content"):
        store.put_file(ref.key, source, file_sha256(source))
    assert store.measure(ref.key) == ref


def test_s3_store_stores_no_file_unlike_the_digest_it_was_given(s3_server, bucket, tmp_path):
    store = _store(s3_server, bucket)
    source = tmp_path / "export.parquet"
    source.write_bytes(b"row" * 1_000_000)
    digest = file_sha256(source)
    source.write_bytes(b"col" * 1_000_000)  # changed after it was hashed, same size
    with pytest.raises(ObjectIntegrityError):
        store.put_file("runs/r-1/exports/outcomes.parquet", source, digest)
    assert list(store.list("runs/r-1")) == []
