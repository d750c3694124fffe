"""A baseline commit checked out beside this one (a temporary `git worktree`), for the
benchmarks that measure this tree against it in one run."""

from __future__ import annotations

import subprocess
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def baseline_tree(commit: str, into: Path) -> Path:
    """`commit` checked out (detached) at `into/baseline`."""
    tree = into / "baseline"
    subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "worktree", "add", "--detach", str(tree), commit],
        check=True,
        capture_output=True,
    )
    return tree


def remove_tree(tree: Path) -> None:
    subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "worktree", "remove", "--force", str(tree)],
        check=True,
        capture_output=True,
    )
