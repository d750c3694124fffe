"""The production deployment's own PostgreSQL reaches its data through the closed state
directory, and nobody else gets in.

Started by root, the server runs as the `postgres` user, with its cluster in
`<state>/production/postgres/`; the state directory is its owner's alone (0700), so
`synth up --production` gives it and `production/` to the server's group with passage
only (0710). Everything else stays owner-only, and another user can list nothing."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from synth_pipelines.services.production import (
    POSTGRES,
    ProductionLayout,
    create_databases,
    deployment_environment,
    initialize_postgres,
    let_postgres_pass,
    server_services,
)
from synth_pipelines.services.supervisor import start, stop
from synth_pipelines.state_locations import OWNER_ONLY_UMASK, keep_private
from tests.conftest import PROJECT_ROOT
from tests.test_state_directory_owner_only import open_to_others, refused_to_another_user

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="PostgreSQL runs as its own user only when root starts it"
)
IMAGE = {"SYNTH_PROJECT_IMAGE": "synth-pipelines:a", "DOCKER_HOST": "unix:///d.sock"}


@pytest.fixture
def state() -> Iterator[Path]:
    """A state directory in a directory every user may enter, as a checkout is."""
    root = Path(tempfile.mkdtemp(prefix="synth-open-"))
    root.chmod(0o755)
    try:
        yield root / "state"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def owner_only_umask() -> Iterator[None]:
    """As `synth up --production` runs."""
    previous = os.umask(OWNER_ONLY_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def test_the_deployments_database_reaches_its_data_and_nobody_else_gets_in(
    state: Path, owner_only_umask: None
):
    keep_private(state)  # as every `synth` command leaves it
    layout = ProductionLayout.under(state)
    values = deployment_environment(layout, {}, IMAGE, 8)
    let_postgres_pass(layout, values)
    assert initialize_postgres(layout, values)
    (database,) = [s for s in server_services(layout, values) if s.name == POSTGRES]
    start(layout.root, database, cwd=PROJECT_ROOT)
    try:
        assert sorted(create_databases(values)) == ["dagster", "synth_control"]
    finally:
        stop(layout.root, database)
    assert refused_to_another_user("ls", str(state))
    assert open_to_others(state, made_before=set()) == [
        "drwx--x--- .",
        "drwx--x--- production",
    ]
