"""`synth up --production` keeps its deployment's variables in one file: written once,
readable by its owner only, read back on every later start; the servers it names as its own
are the only ones it runs; and `synth down --production` without a deployment says so in one
line."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from synth_pipelines.services import production
from synth_pipelines.services.production import (
    ProductionLayout,
    deployment_environment,
    local_servers,
    read_env_file,
    server_services,
)
from tests.conftest import PROJECT_ROOT

IMAGE = {"SYNTH_PROJECT_IMAGE": "synth-pipelines:a", "DOCKER_HOST": "unix:///d.sock"}


def test_the_first_start_writes_the_file_and_later_starts_keep_it(tmp_path: Path):
    layout = ProductionLayout.under(tmp_path)
    first = deployment_environment(layout, {"SYNTH_POOL_MAX_ACTIVE_ATTEMPTS": "3"}, IMAGE, 8)
    assert stat.S_IMODE(layout.env_file.stat().st_mode) == 0o600  # it holds the signing key
    assert first["SYNTH_POOL_MAX_ACTIVE_ATTEMPTS"] == "3"  # the operator's choice, kept
    assert first["SYNTH_DATA_DIR"] == str(layout.root)
    assert first["DAGSTER_HOME"] == str(layout.dagster_home)
    assert len(first["SYNTH_PROXY_SIGNING_KEY"]) == 64
    assert local_servers(first) == {"postgres", "s3", "model-service"}
    ports = {
        first[name].rsplit(":", 1)[1]
        for name in ("SYNTH_S3_ENDPOINT_URL", "SYNTH_PROXY_URL", "SYNTH_DAGSTER_URL")
    }
    assert len(ports) == 3

    # A later start: the same credentials, keys and ports; a new image; the environment
    # it is started from changes nothing that the file holds.
    later = deployment_environment(
        layout,
        {"SYNTH_POOL_MAX_ACTIVE_ATTEMPTS": "99", "TINKER_BASE_URL": "http://elsewhere:1"},
        {**IMAGE, "SYNTH_PROJECT_IMAGE": "synth-pipelines:b"},
        8,
    )
    assert later == {**first, "SYNTH_PROJECT_IMAGE": "synth-pipelines:b"}
    assert read_env_file(layout.env_file) == later

    # The file is what a shell sources: every value comes back the same.
    printed = subprocess.run(
        ["bash", "-c", f"set -a; . {layout.env_file}; set +a; env -0"],
        capture_output=True,
        check=True,
        env={"PATH": os.environ["PATH"]},
    ).stdout.decode()
    sourced = dict(item.split("=", 1) for item in printed.split("\0") if "=" in item)
    assert {name: sourced[name] for name in later} == later


def test_a_named_tinker_service_replaces_the_local_model_service(tmp_path: Path):
    layout = ProductionLayout.under(tmp_path)
    chosen = {"TINKER_BASE_URL": "http://tinker.example:8000", "TINKER_API_KEY": "tml-x"}
    values = deployment_environment(layout, chosen, IMAGE, 8)
    assert local_servers(values) == {"postgres", "s3"}
    assert (
        values["TINKER_BASE_URL"] == values["SYNTH_MODEL_SERVICE_URL"] == chosen["TINKER_BASE_URL"]
    )
    assert values["TINKER_API_KEY"] == "tml-x"


def test_a_database_of_the_operators_own_needs_no_local_postgresql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    layout = ProductionLayout.under(tmp_path)
    values = deployment_environment(layout, {}, IMAGE, 8)
    values["SYNTH_PRODUCTION_LOCAL_SERVERS"] = "s3,model-service"

    # A host without PostgreSQL: only the deployment's own database would need it.
    def not_installed() -> Path:
        raise production.ProductionError("PostgreSQL is not installed; run `make setup`")

    monkeypatch.setattr(production, "postgres_bin_dir", not_installed)
    assert [service.name for service in server_services(layout, values)] == ["s3"]


def test_down_without_a_deployment_is_one_line_and_exit_2(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "synth_pipelines.cli", "down", "--production"],
        cwd=PROJECT_ROOT,
        env={**os.environ, "SYNTH_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no production deployment" in done.stderr
    assert not any(tmp_path.iterdir())
