from pathlib import Path

import pytest

from synth_pipelines.storage.objectstore import (
    LocalObjectStore,
    ObjectExistsError,
    ObjectIntegrityError,
    ObjectMissingError,
    file_sha256,
    sha256_hex,
)


def test_put_is_create_only_and_idempotent_for_identical_bytes(tmp_path: Path):
    store = LocalObjectStore(tmp_path)
    first = store.put("a/b.bin", b"hello")
    again = store.put("a/b.bin", b"hello")
    assert first == again
    assert first.sha256 == sha256_hex(b"hello")
    with pytest.raises(ObjectExistsError):
        store.put("a/b.bin", b"different")
    assert store.get("a/b.bin") == b"hello"


def test_get_detects_bytes_changed_after_publication(tmp_path: Path):
    store = LocalObjectStore(tmp_path)
    ref = store.put("evidence/x.parquet", b"original")
    (tmp_path / "evidence" / "x.parquet").write_bytes(b"tampered")
    with pytest.raises(ObjectIntegrityError, match="changed after it was published"):
        store.get(ref.key, expected_sha256=ref.sha256)


def test_missing_object_and_unsafe_keys_are_refused(tmp_path: Path):
    store = LocalObjectStore(tmp_path)
    with pytest.raises(ObjectMissingError):
        store.get("nope")
    for key in ("../escape", "/abs", "a//b", "a/./b"):
        with pytest.raises(ValueError, match="invalid object key"):
            store.put(key, b"x")


def test_list_returns_keys_under_a_prefix_without_staging_files(tmp_path: Path):
    store = LocalObjectStore(tmp_path)
    store.put("runs/r1/a", b"1")
    store.put("runs/r1/b", b"2")
    store.put("runs/r2/c", b"3")
    assert list(store.list("runs/r1")) == ["runs/r1/a", "runs/r1/b"]


def test_put_file_stores_the_files_bytes_create_only(tmp_path: Path):
    store = LocalObjectStore(tmp_path / "store")
    source = tmp_path / "table.parquet"
    source.write_bytes(b"x" * (3 << 20))
    ref = store.put_file("runs/r1/exports/table.parquet", source, file_sha256(source))
    assert (ref.sha256, ref.size) == (sha256_hex(source.read_bytes()), 3 << 20)
    assert store.put_file(ref.key, source, ref.sha256) == ref
    source.write_bytes(b"y")
    with pytest.raises(ObjectExistsError):
        store.put_file(ref.key, source, file_sha256(source))
    assert store.measure(ref.key) == ref
    assert [name for name in store.list("runs/") if ".put-" in name] == []


def test_put_file_stores_nothing_unlike_the_digest_it_was_given(tmp_path: Path):
    store = LocalObjectStore(tmp_path / "store")
    source = tmp_path / "table.parquet"
    source.write_bytes(b"x" * (3 << 20))
    digest = file_sha256(source)
    source.write_bytes(b"y" * (3 << 20))  # changed after it was hashed, same size
    with pytest.raises(ObjectIntegrityError, match="is not the sha256"):
        store.put_file("runs/r1/exports/table.parquet", source, digest)
    assert list(store.list("runs/")) == []
