"""The platform's processes create owner-only files (umask 077, `state_locations.py`), and
none of that reaches a sandbox: what the host lays down for a task published as a
package (its WORKDIR, its COPY and ADD files and the directories around them, what is
uploaded from it) is open to the task's other users as Docker makes it, and commands
inside run with a container's umask (022). Before, under that umask a task's user other
than root could not even enter /app, and every file a command made was 0600."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import isolated_state, make_environment, make_task

from synth_pipelines.contracts.dataset import TaskRef
from synth_pipelines.registry.task_packages import materialize_task, package_sha256, package_task
from synth_pipelines.storage.objectstore import LocalObjectStore

PLATFORM_UMASK = 0o077
"""What the `synth` executable and the services it supervises run with."""
TASK_USER = 1000
DOCKERFILE = """\
FROM python:3.12-slim
WORKDIR /app/work
COPY src /app/src
ADD bundle.tar /opt/
ENV GREETING=hello
"""


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from isolated_state(tmp_path, monkeypatch)


@pytest.fixture(autouse=True)
def owner_only_umask() -> Iterator[None]:
    previous = os.umask(PLATFORM_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def _bundle() -> bytes:
    """A tar listing a file only: the directories above it are implied."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        data = b"bundled\n"
        member = tarfile.TarInfo("deep/dir/file.txt")
        member.size, member.mode = len(data), 0o644
        archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def _published_task(tmp_path: Path) -> Path:
    """The task as a run worker has it: packed, stored, and extracted from the store."""
    task = make_task(tmp_path / "authored", dockerfile=DOCKERFILE)
    module = task / "environment" / "src" / "pkg" / "module.py"
    module.parent.mkdir(parents=True)
    module.write_text("VALUE = 1\n")
    (task / "environment" / "bundle.tar").write_bytes(_bundle())
    package = package_task(task)
    store = LocalObjectStore(tmp_path / "objects")
    store.put(package.key, package.archive)
    ref = TaskRef(
        position=0,
        name=package.name,
        digest=package.digest,
        package_key=package.key,
        package_sha256=package_sha256(package),
    )
    return materialize_task(store, ref, tmp_path / "task-cache")


def test_a_tasks_files_are_open_to_its_users_and_commands_get_a_containers_umask(tmp_path):
    task = _published_task(tmp_path)
    environment = make_environment(task, tmp_path / "trial")

    async def go():
        await environment.start(force_build=False)
        try:
            await environment.upload_dir(task / "tests", "/tests")
            as_user = [
                await environment.exec(command, user=TASK_USER)
                for command in (
                    "ls /app/work",
                    "cat /app/src/pkg/module.py",
                    "cat /opt/deep/dir/file.txt",
                    "cat /tests/test.sh",
                )
            ]
            made = await environment.exec(
                "umask; touch /app/made && mkdir /app/made-dir && "
                "stat -c %a /app/made /app/made-dir"
            )
            return as_user, made
        finally:
            await environment.stop(delete=True)

    as_user, made = asyncio.run(go())
    for result in as_user:
        assert result.return_code == 0, result.stderr
    assert as_user[1].stdout == "VALUE = 1\n"
    assert as_user[2].stdout == "bundled\n"
    assert made.stdout.split() == ["0022", "644", "755"], made.stderr
