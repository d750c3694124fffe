"""A sandbox writes only inside its own mounts and sees nothing private of the host."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sandbox_support import isolated_state, make_environment, make_task

from synth_pipelines.config import Settings

OUTSIDE_TARGETS = [
    "/usr/sandbox-probe",
    "/etc/sandbox-probe",
    "/sandbox-probe",
    "/lib/sandbox-probe",
]


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def run(environment, *commands: str):
    async def go():
        await environment.start(force_build=False)
        try:
            return [await environment.exec(command) for command in commands]
        finally:
            await environment.stop(delete=True)

    return asyncio.run(go())


def test_sandbox_cannot_write_outside_its_mounts(tmp_path):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")
    results = run(environment, *(f"echo x > {target}" for target in OUTSIDE_TARGETS))
    for target, result in zip(OUTSIDE_TARGETS, results, strict=True):
        assert result.return_code != 0, target
        assert "Read-only file system" in (result.stderr or ""), (target, result)
    for target in OUTSIDE_TARGETS:
        assert not Path(target).exists()


def test_sandbox_writes_land_in_its_own_directory(tmp_path):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")

    async def go():
        await environment.start(force_build=False)
        try:
            await environment.exec("echo written > /app/out.txt")
            return (environment.sandbox_dir / "fs" / "app" / "out.txt").read_text()
        finally:
            await environment.stop(delete=True)

    assert asyncio.run(go()) == "written\n"


def test_sandbox_cannot_see_operator_home_or_project_checkout(tmp_path):
    project_root = Settings().project_root
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")
    home, checkout, state, shadow = run(
        environment,
        "ls -A /root",
        f"test -e {project_root} && echo visible || echo hidden",
        f"test -e {tmp_path} && echo visible || echo hidden",
        "test -e /etc/shadow && echo visible || echo hidden",
    )
    assert home.stdout is None
    assert checkout.stdout.strip() == "hidden"
    assert state.stdout.strip() == "hidden"
    assert shadow.stdout.strip() == "hidden"


def test_uploads_and_downloads_round_trip_and_merge(tmp_path):
    source = tmp_path / "upload"
    (source / "nested").mkdir(parents=True)
    (source / "nested" / "data.txt").write_text("payload")
    (source / "run.sh").write_text("#!/bin/bash\necho ran\n")
    (source / "run.sh").chmod(0o755)
    target = tmp_path / "download"
    (target / "existing.txt").parent.mkdir()
    (target / "existing.txt").write_text("kept")
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")

    async def go():
        await environment.start(force_build=False)
        try:
            await environment.upload_dir(source, "/app/uploaded")
            await environment.upload_file(source / "run.sh", "/solution/deep/run.sh")
            ran = await environment.exec("/solution/deep/run.sh")
            await environment.download_dir("/app/uploaded", target)
            await environment.download_file("/app/seed.txt", tmp_path / "seed.txt")
            return ran
        finally:
            await environment.stop(delete=True)

    ran = asyncio.run(go())
    assert ran.stdout == "ran\n"
    assert (target / "nested" / "data.txt").read_text() == "payload"
    assert (target / "existing.txt").read_text() == "kept"
    assert (tmp_path / "seed.txt").read_text() == "seed\n"


def test_download_skips_links_that_point_out_of_the_tree(tmp_path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host only")
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")

    async def go():
        await environment.start(force_build=False)
        try:
            await environment.exec(
                f"mkdir -p /app/out && ln -s {secret} /app/out/link && echo ok > /app/out/file"
            )
            await environment.download_dir("/app/out", tmp_path / "out")
        finally:
            await environment.stop(delete=True)

    asyncio.run(go())
    assert not (tmp_path / "out" / "link").is_symlink()
    assert (tmp_path / "out" / "file").read_text() == "ok\n"
    assert secret.read_text() == "host only"
