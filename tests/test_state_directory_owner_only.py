"""The state directory and the Dagster home are their owner's alone.

`synth up` is run for real in a state directory whose parent anyone may enter (as a
checkout is), then a dataset is published, a run is evaluated through the daemon (a run
worker, a bubblewrap sandbox, an archived trial) and a model call goes through the
capture proxy: the control database, the objects, the evidence spool, the signing key,
the services' pid files, logs and sockets, Dagster's storage. Every directory the
platform made there is 0700 and every file 0600, but the task files of the task cache,
which keep the modes their package gives them for the sandboxes' users, inside a 0700
directory; and another user of the host can neither list the state directory nor read
the control database. Before, the state directory was 0755 and the control database
0644: any local user could read every run, token revocation and evidence chunk."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET
from tests.production_services import free_port

pytestmark = pytest.mark.slow

SYNTH = str(Path(sys.executable).parent / "synth")
ANOTHER_USER = 65534  # nobody
ADDRESSES = (
    "SYNTH_DAGSTER_URL",
    "SYNTH_PROXY_URL",
    "SYNTH_MODEL_SERVICE_URL",
    "SYNTH_GATEWAY_URL",
)
PLAN = {
    "kind": "eval",
    "attempts_per_task": 1,
    "budget": {"max_active_attempts": 1, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
}
TASK_CACHE = Path("work", "tasks")
"""Each task extracted once per digest, in a 0700 directory of its own."""


@dataclass(frozen=True)
class Host:
    root: Path
    env: dict[str, str]

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster_home"

    def synth(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [SYNTH, *args],
            env=self.env,
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"synth {' '.join(args)}: {done.stdout}{done.stderr}"
        return done


@pytest.fixture
def host() -> Iterator[Host]:
    """A state directory and a Dagster home in a directory every user may enter."""
    root = Path(tempfile.mkdtemp(prefix="synth-open-"))
    root.chmod(0o755)
    home = root / "dagster_home"
    home.mkdir(mode=0o755)
    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SYNTH_", "DAGSTER_", "TINKER_"))
    }
    env = {
        **inherited,
        "SYNTH_DATA_DIR": str(root / "state"),
        "DAGSTER_HOME": str(home),
        "SYNTH_IMAGE_CACHE_DIR": os.environ["SYNTH_IMAGE_CACHE_DIR"],
        **{variable: f"http://127.0.0.1:{free_port()}" for variable in ADDRESSES},
    }
    try:
        yield Host(root, env)
    finally:
        subprocess.run([SYNTH, "down"], env=env, cwd=PROJECT_ROOT, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def open_to_others(top: Path, *, made_before: set[Path]) -> list[str]:
    """What the platform made under `top` that a group or other user may use, with its
    mode; a task's files in the task cache may, inside their own 0700 directory."""
    found = []
    for directory, subdirectories, files in os.walk(top):
        for path in [Path(directory), *(Path(directory, name) for name in subdirectories + files)]:
            mode = path.lstat().st_mode
            if path in made_before or stat.S_ISLNK(mode) or not mode & 0o077:
                continue
            relative = path.relative_to(top)
            if relative.is_relative_to(TASK_CACHE) and len(relative.parts) > 3:
                digest = top.joinpath(*relative.parts[:3])
                if stat.S_IMODE(digest.stat().st_mode) == 0o700:
                    continue
            found.append(f"{stat.filemode(mode)} {relative}")
    return sorted(set(found))


def refused_to_another_user(*command: str) -> bool:
    """Whether `command` (a coreutils program on a path), run as another user of the host
    without privileges, was refused for permission."""
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={ANOTHER_USER}",
            f"--regid={ANOTHER_USER}",
            "--clear-groups",
            *command,
        ],
        capture_output=True,
        text=True,
    )
    return done.returncode != 0 and "Permission denied" in done.stderr


def _call_through_the_proxy(host: Host, proxy_url: str) -> None:
    """One Messages call, staged in the spool as every sampled call is."""
    token = host.synth(
        "proxy", "token", "--run", "r-probe", "--attempt", "a-probe", "--model", "synth/qwen3-tiny"
    ).stdout.strip()
    answer = httpx.post(
        f"{proxy_url}/v1/messages",
        headers={"x-api-key": token, "anthropic-version": "2023-06-01"},
        json={
            "model": "synth/qwen3-tiny",
            "max_tokens": 2,
            "messages": [{"role": "user", "content": "hi"}],
        },
        timeout=120,
    )
    assert answer.status_code == 200, answer.text


def test_what_the_platform_keeps_is_its_owners_alone(host: Host, tmp_path: Path):
    made_before = {host.dagster_home / "dagster.yaml"}  # the operator's configuration
    up = json.loads(host.synth("up", "--json").stdout)
    dataset = tmp_path / "dataset"
    shutil.copytree(SAMPLE_DATASET / "update-version-file", dataset / "update-version-file")
    host.synth("dataset", "publish", str(dataset), "--name", "test/one", "--version", "v1")
    run = host.synth(
        "run",
        "start",
        "--dataset",
        "test/one@v1",
        "--actor",
        f"@{PROJECT_ROOT / 'profiles' / 'oracle.json'}",
        "--plan",
        json.dumps(PLAN),
        "--wait",
        "--json",
    )
    shown = json.loads(run.stdout)  # `run show --json` once the run has stopped
    assert (shown["status"], shown["summary"]["passed"]) == ("succeeded", 1), run.stdout
    proxy = next(row["address"] for row in up if row["service"] == "capture-proxy")
    _call_through_the_proxy(host, proxy)
    staged = list((host.state / "spool" / "staged").iterdir())
    assert staged and (host.state / "control.db").is_file()
    assert any((host.state / "objects" / "runs").rglob("*.tar.gz"))  # the archived trial

    assert open_to_others(host.state, made_before=made_before) == []
    assert open_to_others(host.dagster_home, made_before=made_before) == []

    assert refused_to_another_user("ls", str(host.state))
    assert refused_to_another_user("head", "-c", "16", str(host.state / "control.db"))
