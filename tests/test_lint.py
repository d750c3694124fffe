"""The code passes the project's own checks (`make lint` runs just these): part of the suite,
so that `make test` runs them on one worker while the other runs tests (each is one
process on one core)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "check",
    [
        ("ruff", "check", "."),
        ("ruff", "format", "--check", "."),
        ("lint-imports",),
        ("mypy",),
    ],
    ids=["ruff-check", "ruff-format", "import-contracts", "mypy"],
)
def test_the_code_passes(check: tuple[str, ...]):
    done = subprocess.run(
        [str(BIN / check[0]), *check[1:]],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
