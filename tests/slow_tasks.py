"""A dataset of one sample task whose oracle sleeps first: a batch that lasts until it is
stopped, for the tests that stop one."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import SAMPLE_DATASET


def slow_dataset(root: Path, seconds: int) -> Path:
    dataset = root / "slow"
    task = shutil.copytree(SAMPLE_DATASET / "write-robots-txt", dataset / "write-robots-txt")
    solve = task / "solution" / "solve.sh"
    lines = solve.read_text().splitlines()
    solve.write_text("\n".join([lines[0], f"sleep {seconds}", *lines[1:]]) + "\n")
    config = task / "task.toml"
    config.write_text(
        config.read_text().replace("timeout_sec = 120", f"timeout_sec = {seconds * 2}")
    )
    return dataset
