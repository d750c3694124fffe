"""The `state` fixture's platform state, for a whole test module: several tests read the
same runs, and running them once keeps the module fast."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from synth_pipelines.control.database import engine_for
from tests.conftest import PROJECT_ROOT, serving_gateway


@contextmanager
def module_state(tmp_path: Path) -> Iterator[Path]:
    """An empty control database, object store, work dir and Dagster home under `tmp_path`,
    and the gateway over them that the CLI speaks to."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SYNTH_DATA_DIR", str(tmp_path / "state"))
        patch.setenv("DAGSTER_HOME", str(home))
        patch.delenv("SYNTH_DATABASE_URL", raising=False)
        patch.delenv("SYNTH_OBJECT_STORE_URL", raising=False)
        engine_for.cache_clear()
        try:
            with serving_gateway(patch):
                yield tmp_path / "state"
        finally:
            engine_for.cache_clear()
