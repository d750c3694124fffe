"""Create-only, checksummed object storage: the local filesystem or S3.

Every object is written once. A second write of the same key succeeds only when the
bytes are identical (an idempotent retry); different bytes under an existing key are
refused. Reads verify the full-object SHA-256 when the caller knows it, so a changed
object is detected wherever it is read.

Bulk bytes from operators (task packages) arrive through upload grants without passing
through the gateway's memory: an S3 store hands out presigned create-only PUTs bound to
the SHA-256 (`S3ObjectStore.presigned_put`); the local store takes the bytes in pieces
into a file beside their key (`LocalObjectStore.incoming`). Either way `measure` hashes
what was stored, read in pieces, before anything refers to it. Bulk bytes leave the same
way: a presigned GET (`S3ObjectStore.presigned_get`), or the local file streamed by the
gateway (`LocalObjectStore.file`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol
from urllib.parse import urlparse

if TYPE_CHECKING:
    from synth_pipelines.config import Settings


class ObjectExistsError(Exception):
    """A different object already holds this key."""


class ObjectIntegrityError(Exception):
    """An object's bytes no longer match the checksum recorded for them."""


class ObjectMissingError(FileNotFoundError):
    """No object is stored under this key."""


@dataclass(frozen=True)
class ObjectRef:
    key: str
    sha256: str
    size: int

    def as_dict(self) -> dict[str, str | int]:
        return {"key": self.key, "sha256": self.sha256, "size": self.size}


READ_CHUNK = 1 << 20
"""How much of an object is held at once while it is hashed."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _measured(key: str, chunks: Iterable[bytes]) -> ObjectRef:
    digest, size = hashlib.sha256(), 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
    return ObjectRef(key, digest.hexdigest(), size)


def _unlike(source: Path, expected: ObjectRef) -> ObjectIntegrityError:
    return ObjectIntegrityError(
        f"file {source} is not the sha256 {expected.sha256} and size {expected.size} it was "
        f"to be stored as {expected.key!r} with: it changed, or the digest is another file's"
    )


def _copied(chunks: Iterable[bytes], out: BinaryIO) -> Iterator[bytes]:
    """Each chunk, once written to `out`."""
    for chunk in chunks:
        out.write(chunk)
        yield chunk


def _file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(READ_CHUNK):
            yield chunk


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a piece at a time."""
    return _measured(str(path), _file_chunks(path)).sha256


def _check_key(key: str) -> str:
    if not key or key.startswith("/") or any(part in ("", ".", "..") for part in key.split("/")):
        raise ValueError(f"invalid object key {key!r}: use relative 'a/b/c' keys without '..'")
    return key


class ObjectStore(Protocol):
    url: str

    def put(self, key: str, data: bytes) -> ObjectRef: ...

    def put_file(self, key: str, source: Path, sha256: str) -> ObjectRef:
        """The file's bytes as the object, read from disk a piece at a time. `sha256` is
        the file's digest as the caller computed it (`file_sha256`): the store stores
        nothing that differs from it (`ObjectIntegrityError`). The local store checks the
        bytes as it copies them rather than reading the file once more beforehand."""
        ...

    def get(self, key: str, expected_sha256: str | None = None) -> bytes: ...

    def head(self, key: str) -> ObjectRef | None: ...

    def measure(self, key: str) -> ObjectRef | None:
        """The object's size and the SHA-256 of its stored bytes, read in pieces (never
        a checksum someone declared for them); None when there is none. Bytes the store
        itself finds unlike the checksum they were uploaded with raise
        `ObjectIntegrityError`."""
        ...

    def list(self, prefix: str) -> Iterator[str]: ...

    def uri(self, key: str) -> str: ...


def _verified(key: str, data: bytes, expected_sha256: str | None) -> bytes:
    if expected_sha256 is not None and sha256_hex(data) != expected_sha256:
        raise ObjectIntegrityError(
            f"object {key!r} does not match its recorded sha256 {expected_sha256}: "
            "it was changed after it was published"
        )
    return data


class LocalObjectStore:
    """Objects as files under one directory; create-only through hard links."""

    def __init__(self, root: Path):
        self.root = root
        self.url = f"file://{root}"
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def put(self, key: str, data: bytes) -> ObjectRef:
        return self._create(
            ObjectRef(key, sha256_hex(data), len(data)), lambda out: out.write(data)
        )

    def put_file(self, key: str, source: Path, sha256: str) -> ObjectRef:
        written = ObjectRef(key, sha256, source.stat().st_size)

        def copy(out: BinaryIO) -> None:
            # Hashed as it is copied, before the copy is linked in place.
            copied = _measured(key, _copied(_file_chunks(source), out))
            if copied != written:
                raise _unlike(source, written)

        return self._create(written, copy)

    def _create(self, written: ObjectRef, write: Callable[[BinaryIO], object]) -> ObjectRef:
        """Write to a temporary file beside the key, then link it there: the key holds the
        whole object or nothing, and an object already there is never replaced."""
        path = self._path(written.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".put-")
        try:
            with os.fdopen(fd, "wb") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                existing = self.measure(written.key)
                if existing is None or existing.sha256 != written.sha256:
                    raise ObjectExistsError(
                        f"object {written.key!r} already exists with different content"
                    ) from None
        finally:
            os.unlink(tmp)
        return written

    def get(self, key: str, expected_sha256: str | None = None) -> bytes:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ObjectMissingError(f"no object {key!r} in {self.url}") from None
        return _verified(key, data, expected_sha256)

    def head(self, key: str) -> ObjectRef | None:
        return self.measure(key)

    def measure(self, key: str) -> ObjectRef | None:
        path = self._path(key)
        if not path.is_file():
            return None
        return _measured(key, _file_chunks(path))

    def file(self, key: str) -> Path:
        """The file that holds `key`, for streaming it from disk a piece at a time."""
        path = self._path(key)
        if not path.is_file():
            raise ObjectMissingError(f"no object {key!r} in {self.url}")
        return path

    def incoming(self, key: str) -> IncomingObject:
        """A file beside `key` to receive its bytes in pieces (`IncomingObject`); refused
        at once when an object holds the key already."""
        path = self._path(key)
        if path.exists():
            raise ObjectExistsError(f"object {key!r} already exists; objects are written once")
        path.parent.mkdir(parents=True, exist_ok=True)
        return IncomingObject(key, path)

    def list(self, prefix: str) -> Iterator[str]:
        base = self.root / prefix if prefix else self.root
        if not base.exists():
            return
        for path in sorted(base.rglob("*")):
            if path.is_file() and not path.name.startswith(".put-"):
                yield path.relative_to(self.root).as_posix()

    def uri(self, key: str) -> str:
        return f"file://{self._path(key)}"


class IncomingObject:
    """An object arriving in pieces: each is hashed and written to a temporary file beside
    its key, which becomes the object only if the whole is what was promised, and only if
    no object holds the key yet (a hard link, as `put` makes)."""

    def __init__(self, key: str, path: Path) -> None:
        self.key = key
        self.size = 0
        self._path = path
        fd, staged = tempfile.mkstemp(dir=path.parent, prefix=".put-")
        self._staged = Path(staged)
        self._handle = os.fdopen(fd, "wb")
        self._digest = hashlib.sha256()

    def write(self, chunk: bytes) -> None:
        self._digest.update(chunk)
        self._handle.write(chunk)
        self.size += len(chunk)

    def publish(self, sha256: str) -> ObjectRef:
        """Make the received bytes the object, if they hash to `sha256` and the key is
        free; either refusal leaves nothing under the key."""
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        received = self._digest.hexdigest()
        if received != sha256:
            raise ObjectIntegrityError(
                f"the bytes sent for {self.key!r} hash to sha256 {received}, not the "
                f"{sha256} they were granted for"
            )
        try:
            os.link(self._staged, self._path)
        except FileExistsError:
            raise ObjectExistsError(
                f"object {self.key!r} already exists; objects are written once"
            ) from None
        return ObjectRef(self.key, received, self.size)

    def discard(self) -> None:
        """Remove the temporary file, published or not."""
        self._handle.close()
        self._staged.unlink(missing_ok=True)


class S3ObjectStore:
    """Objects in an S3 bucket under a prefix, written with conditional create.

    `If-None-Match: *` makes the write create-only on the server, and the SHA-256
    checksum header makes the provider verify the full object on upload.
    """

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None):
        import boto3

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        from botocore.config import Config

        # Signature version 4 for presigned URLs too, which sign the headers they bind
        # (botocore presigns S3 URLs with version 2 unless told).
        self.client = boto3.client(
            "s3", endpoint_url=endpoint_url, config=Config(signature_version="s3v4")
        )

    def _full(self, key: str) -> str:
        _check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: bytes) -> ObjectRef:
        return self._create(ObjectRef(key, sha256_hex(data), len(data)), data)

    def put_file(self, key: str, source: Path, sha256: str) -> ObjectRef:
        # Measured before the upload, not trusted to the server: S3 refuses a body unlike
        # the checksum sent with it, but not every S3-compatible server checks, and a
        # create-only object stored wrong cannot be taken back.
        written = _measured(key, _file_chunks(source))
        if written.sha256 != sha256:
            raise _unlike(source, ObjectRef(key, sha256, written.size))
        with source.open("rb") as body:
            return self._create(written, body)

    def _create(self, written: ObjectRef, body: bytes | BinaryIO) -> ObjectRef:
        from botocore.exceptions import ClientError

        checksum = base64.b64encode(bytes.fromhex(written.sha256)).decode()
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=self._full(written.key),
                Body=body,
                ChecksumSHA256=checksum,
                IfNoneMatch="*",
                Metadata={"sha256": written.sha256},
            )
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code not in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise
            existing = self.measure(written.key)
            if existing is None or existing.sha256 != written.sha256:
                raise ObjectExistsError(
                    f"object {written.key!r} already exists with different content"
                ) from None
        return written

    def get(self, key: str, expected_sha256: str | None = None) -> bytes:
        from botocore.exceptions import ClientError

        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._full(key))["Body"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise ObjectMissingError(f"no object {key!r} in {self.url}") from None
            raise
        return _verified(key, body.read(), expected_sha256)

    def head(self, key: str) -> ObjectRef | None:
        from botocore.exceptions import ClientError

        try:
            meta = self.client.head_object(Bucket=self.bucket, Key=self._full(key))
        except ClientError:
            return None
        return ObjectRef(key, meta.get("Metadata", {}).get("sha256", ""), meta["ContentLength"])

    def measure(self, key: str) -> ObjectRef | None:
        # The server's checksum of a presigned upload is only what its uploader declared
        # where the server does not check it (moto stores it unchecked), so the bytes are
        # hashed as they stream by; botocore checks them against that checksum too.
        from botocore.exceptions import ClientError, FlexibleChecksumError

        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._full(key))["Body"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        try:
            return _measured(key, body.iter_chunks(READ_CHUNK))
        except FlexibleChecksumError:
            raise ObjectIntegrityError(
                f"object {key!r} does not match the SHA-256 checksum it was uploaded with"
            ) from None

    def presigned_put(self, key: str, sha256: str, expires_sec: int) -> tuple[str, dict[str, str]]:
        """A URL that PUTs `key` once, for `expires_sec`: `If-None-Match: *` (create-only)
        and the SHA-256 checksum are among its signed headers, so the uploader must send
        them as given (the returned headers) and cannot change them."""
        checksum = base64.b64encode(bytes.fromhex(sha256)).decode()
        url = self.client.generate_presigned_url(
            "put_object",
            Params={
                "Bucket": self.bucket,
                "Key": self._full(key),
                "ChecksumAlgorithm": "SHA256",
                "ChecksumSHA256": checksum,
                "IfNoneMatch": "*",
                "Metadata": {"sha256": sha256},
            },
            ExpiresIn=expires_sec,
        )
        headers = {
            "If-None-Match": "*",
            "x-amz-checksum-sha256": checksum,
            "x-amz-sdk-checksum-algorithm": "SHA256",
            "x-amz-meta-sha256": sha256,
        }
        return str(url), headers

    def presigned_get(self, key: str, expires_sec: int) -> str:
        """A URL that GETs `key` for `expires_sec`, signed (version 4) for nothing else."""
        url = self.client.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": self._full(key)},
            ExpiresIn=expires_sec,
        )
        return str(url)

    def list(self, prefix: str) -> Iterator[str]:
        paginator = self.client.get_paginator("list_objects_v2")
        full_prefix = self._full(prefix) if prefix else self.prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        for page in paginator.paginate(Bucket=self.bucket, Prefix=full_prefix):
            for item in page.get("Contents", []):
                yield item["Key"][strip:]

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._full(key)}"


def open_object_store(url: str, endpoint_url: str | None = None) -> ObjectStore:
    """`file:///abs/dir` or `s3://bucket/prefix`."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return LocalObjectStore(Path(parsed.path))
    if parsed.scheme == "s3":
        return S3ObjectStore(parsed.netloc, parsed.path, endpoint_url=endpoint_url)
    raise ValueError(f"unsupported object store url {url!r}: use file:///dir or s3://bucket/prefix")


def configured_object_store(config: Settings) -> ObjectStore:
    """The object store `config` names."""
    return open_object_store(config.objects_url, endpoint_url=config.s3_endpoint_url)
