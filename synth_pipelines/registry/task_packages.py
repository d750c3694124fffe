"""Task packages: a task directory as a deterministic archive, stored by content.

The package key names the archive; the task's identity is Harbor's content digest
(`Packager.compute_content_hash`), re-checked after every extraction.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harbor.models.task.task import Task
from harbor.publisher.packager import Packager
from pydantic import ValidationError

from synth_pipelines.contracts.build_context import context_sources, resolve_source
from synth_pipelines.contracts.dataset import TaskRef
from synth_pipelines.storage.objectstore import ObjectStore, sha256_hex


class TaskFormatError(ValueError):
    """A task directory Harbor cannot load."""


@dataclass(frozen=True)
class TaskPackage:
    name: str
    digest: str
    archive: bytes

    @property
    def key(self) -> str:
        return package_key(self.digest)


def package_key(digest: str) -> str:
    """Where the package of the task with Harbor digest `digest` is stored."""
    return f"tasks/sha256/{digest.removeprefix('sha256:')}.tar.gz"


def load_task(task_dir: Path) -> Task:
    """Harbor's view of a task, with a one-line reason when the directory is not one."""
    config = task_dir / "task.toml"
    if not config.is_file():
        raise TaskFormatError(f"{task_dir}: no task.toml; a Harbor task directory needs one")
    try:
        return Task(task_dir)
    except tomllib.TOMLDecodeError as error:
        raise TaskFormatError(f"{config}: not valid TOML ({error})") from None
    except UnicodeDecodeError as error:
        raise TaskFormatError(
            f"{task_dir}: a task file is not UTF-8 text (byte {error.start}: {error.reason}); "
            "task.toml and instruction.md must be text"
        ) from None
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "task.toml"
        raise TaskFormatError(f"{config}: {where}: {first['msg']}") from None
    except (ValueError, FileNotFoundError) as error:
        raise TaskFormatError(f"{task_dir}: {error}") from None


def check_build_context(task: Task) -> None:
    """Refuse a task whose Dockerfile copies what its build context does not hold (a
    missing file, `COPY ../x`): no builder can prepare it, so it would fail every
    attempt, long after publishing."""
    dockerfile = task.paths.environment_dir / "Dockerfile"
    if not dockerfile.is_file():
        return
    for source, line in context_sources(dockerfile):
        try:
            resolve_source(source, line, dockerfile.parent)
        except (FileNotFoundError, PermissionError) as error:
            raise TaskFormatError(f"{dockerfile}: {error}") from None


def _archive(task_dir: Path, files: list[Path]) -> bytes:
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in files:
            data = path.read_bytes()
            info = tarfile.TarInfo(f"{task_dir.name}/{path.relative_to(task_dir).as_posix()}")
            info.size = len(data)
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def package_task(task_dir: Path) -> TaskPackage:
    task = load_task(task_dir)
    check_build_context(task)
    content_hash, files = Packager.compute_content_hash(task_dir)
    return TaskPackage(task.name, f"sha256:{content_hash}", _archive(task_dir.resolve(), files))


def materialize_task(store: ObjectStore, ref: TaskRef, cache_dir: Path) -> Path:
    """The task's directory on local disk, extracted once per digest and verified."""
    home = cache_dir / ref.digest.removeprefix("sha256:")
    if home.is_dir():
        return next(path for path in home.iterdir() if path.is_dir())
    archive = store.get(ref.package_key, expected_sha256=ref.package_sha256)
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=cache_dir, prefix=".extract-"))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            tar.extractall(staging, filter="data")
        (task_dir,) = [path for path in staging.iterdir() if path.is_dir()]
        _open_directories(task_dir)
        actual, _ = Packager.compute_content_hash(task_dir)
        if f"sha256:{actual}" != ref.digest:
            raise ValueError(
                f"task package {ref.package_key} extracts to digest sha256:{actual}, "
                f"not the pinned {ref.digest}"
            )
        try:
            staging.rename(home)
        except OSError:
            # Another process materialized the same digest first; theirs is identical.
            shutil.rmtree(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return next(path for path in home.iterdir() if path.is_dir())


def _open_directories(task_dir: Path) -> None:
    """A package lists files only (0644 or 0755): its directories are 0755 as a checkout
    has them, not whatever the extracting process's umask gives (the platform's is
    owner-only), since they are copied into sandboxes whose task users must enter them.
    The cache around them stays its owner's (the staging directory is 0700)."""
    task_dir.chmod(0o755)
    for directory, subdirectories, _ in os.walk(task_dir):
        for name in subdirectories:
            path = Path(directory, name)
            if not path.is_symlink():
                path.chmod(0o755)


def package_sha256(package: TaskPackage) -> str:
    return sha256_hex(package.archive)
