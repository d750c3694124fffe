"""The environment of an embedded deployment (`synth up`) of a test's own: a state
directory and Dagster home under the test's directory, nothing inherited of the suite's
own settings, and each named service on a free loopback port."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import PROJECT_ROOT
from tests.production_services import free_port

SYNTH = str(Path(sys.executable).parent / "synth")
ADDRESSES = (
    "SYNTH_DAGSTER_URL",
    "SYNTH_PROXY_URL",
    "SYNTH_MODEL_SERVICE_URL",
    "SYNTH_GATEWAY_URL",
)
"""The services `synth up` starts that listen on an address of their own."""


def synth(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """The `synth` command, run as an operator runs it in that environment."""
    return subprocess.run(
        [SYNTH, *args], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600
    )


def embedded_environment(tmp_path: Path, addresses: tuple[str, ...]) -> dict[str, str]:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SYNTH_", "DAGSTER_", "TINKER_"))
    }
    return {
        **inherited,
        "SYNTH_DATA_DIR": str(tmp_path / "state"),
        "DAGSTER_HOME": str(home),
        **{variable: f"http://127.0.0.1:{free_port()}" for variable in addresses},
    }
