"""Files into and out of a running sandbox, as tar streams through host files.

An upload is packed on the host (owned by root inside) and unpacked by `tar` inside
the sandbox; a download is packed by `tar` inside and unpacked on the host with
Harbor's transfer filter. Both run as root of the sandbox, so no sandbox path is ever
resolved on the host, where a link in it would name a host file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import tarfile
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from harbor.environments.base import transfer_tar_filter

from synth_pipelines.sandbox.commands import RunInside
from synth_pipelines.sandbox.errors import SandboxPathError

TRANSFER_TIMEOUT_SEC = 600


class Transfers:
    """Uploads and downloads of one sandbox; `staging_dir` holds their host files."""

    def __init__(self, run: RunInside, staging_dir: Path, session_id: str, logger: logging.Logger):
        self._run = run
        self._staging_dir = staging_dir
        self._session_id = session_id
        self._logger = logger

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        source = Path(source_path)
        if not source.is_file():
            raise SandboxPathError(f"upload source {source} is not a file")
        target = PurePosixPath(target_path)
        await self._push(target.parent, [(source, target.name)])

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        source = Path(source_dir)
        if not source.is_dir():
            raise SandboxPathError(f"upload source {source} is not a directory")
        members = [(child, child.name) for child in source.iterdir()]
        await self._push(PurePosixPath(target_dir), members)

    async def download_file(
        self, source_path: str, target_path: Path | str, *, storage_mb: int | None
    ) -> None:
        source = PurePosixPath(source_path)
        # -h: the file a symlink names inside the sandbox, archived as what it is, so a
        # link to a device, fifo or directory arrives as that entry alone, not content.
        command = (
            f"tar -chf - --sparse --no-recursion -C {shlex.quote(str(source.parent))} "
            f"-- {shlex.quote(source.name)}"
        )
        async with self._pulled(command, source_path, storage_mb) as archive_file:
            with tarfile.open(fileobj=archive_file) as archive:
                member = archive.next()
                if member is None or not member.isfile():
                    raise SandboxPathError(
                        f"{source_path!r} in sandbox {self._session_id} is not a regular file"
                    )
                content = archive.extractfile(member)
                assert content is not None  # a regular file's member always has one
                target = Path(target_path)
                target.parent.mkdir(parents=True, exist_ok=True)
                with content, target.open("wb") as out:
                    shutil.copyfileobj(content, out, 1 << 20)

    async def download_dir(
        self, source_dir: str, target_dir: Path | str, *, storage_mb: int | None
    ) -> None:
        command = f"tar -cf - --sparse -C {shlex.quote(source_dir)} ."
        async with self._pulled(command, source_dir, storage_mb) as archive_file:
            target = Path(target_dir)
            target.mkdir(parents=True, exist_ok=True)
            with tarfile.open(fileobj=archive_file) as archive:
                archive.extractall(target, filter=self._downloadable)

    async def _push(self, target_dir: PurePosixPath, members: list[tuple[Path, str]]) -> None:
        with self._staging_file() as archive_file:
            with tarfile.open(fileobj=archive_file, mode="w") as archive:
                for path, name in members:
                    archive.add(path, arcname=name, filter=_owned_by_root)
            archive_file.seek(0)
            quoted = shlex.quote(str(target_dir))
            await self._transfer(
                f"mkdir -p {quoted} && tar -xf - -C {quoted} --no-same-owner",
                str(target_dir),
                stdin_fd=archive_file.fileno(),
            )

    @contextlib.asynccontextmanager
    async def _pulled(
        self, command: str, path: str, storage_mb: int | None
    ) -> AsyncIterator[BinaryIO]:
        """A host file holding what `command` writes to stdout inside the sandbox.

        With a storage bound, a download is capped at twice `storage_mb`: the sandbox's
        own files fit in that, so anything larger reaches beyond them (through a link
        to the host's system directories) and must not fill the host's disk.
        """
        limit = 2 * storage_mb * 2**20 if storage_mb is not None else None
        with self._staging_file() as archive_file:
            await self._transfer(command, path, stdout_fd=archive_file.fileno(), stdout_limit=limit)
            archive_file.seek(0)
            yield archive_file

    def _staging_file(self) -> BinaryIO:
        """An anonymous host file for a transfer, outside the sandbox's writable state.

        Transfers never stage inside the sandbox: a sandbox that filled its storage
        can still hand over its logs, and nothing inside can swap a staged file.
        """
        return tempfile.TemporaryFile(dir=self._staging_dir)

    async def _transfer(
        self,
        command: str,
        path: str,
        *,
        stdin_fd: int | None = None,
        stdout_fd: int | None = None,
        stdout_limit: int | None = None,
    ) -> None:
        """Run a transfer step inside the sandbox as root; with `stdout_limit`, output
        past that many bytes is cut off and the transfer refused."""
        if stdout_limit is not None:
            command = f"set -o pipefail; {command} | head -c {stdout_limit + 1}"
        result = await self._run(
            command,
            timeout_sec=TRANSFER_TIMEOUT_SEC,
            user="root",
            stdin_fd=stdin_fd,
            stdout_fd=stdout_fd,
        )
        if (
            stdout_limit is not None
            and stdout_fd is not None
            and os.fstat(stdout_fd).st_size > stdout_limit
        ):
            raise SandboxPathError(
                f"Transfer of {path!r} from sandbox {self._session_id} exceeds "
                f"{stdout_limit >> 20} MB, twice the sandbox's storage_mb: it reaches "
                "beyond the sandbox's own files (a link to host directories?) and was refused"
            )
        if result.return_code != 0:
            raise SandboxPathError(
                f"Transfer of {path!r} in sandbox {self._session_id} failed "
                f"(exit {result.return_code}): {(result.stderr or result.stdout or '').strip()}"
            )

    def _downloadable(self, member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo | None:
        """Harbor's transfer filter, skipping (not failing on) links that leave the tree.

        Such links are common (a virtualenv's `python -> /usr/bin/python3`), but on the
        host they would point at the host's files, so they are dropped with a warning.
        """
        try:
            filtered: tarfile.TarInfo | None = transfer_tar_filter(member, destination)
        except tarfile.FilterError as error:
            self._logger.warning("Not downloading %s from sandbox: %s", member.name, error)
            return None
        return filtered


def _owned_by_root(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.uid = member.gid = 0
    member.uname = member.gname = "root"
    return member
