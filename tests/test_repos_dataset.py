"""The bundled repository tasks run on the embedded default: their images are built
from their Dockerfiles (apt and pip in RUN steps), the oracle's fix passes the
project's own tests and doing nothing passes none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sandbox_support import isolated_state, requires_cgroups, run_trial

from synth_pipelines.registry.task_packages import check_build_context, load_task

REPOS = Path(__file__).resolve().parent.parent / "datasets" / "repos"
TASKS = sorted(path.name for path in REPOS.iterdir() if (path / "task.toml").is_file())

pytestmark = [requires_cgroups, pytest.mark.slow]


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def test_the_dataset_holds_six_real_repository_tasks():
    assert len(TASKS) >= 6
    for name in TASKS:
        task = REPOS / name
        dockerfile = (task / "environment" / "Dockerfile").read_text()
        assert "RUN pip download" in dockerfile and "--require-hashes" in dockerfile
        assert "bug.patch" in dockerfile
        check_build_context(load_task(task))


@pytest.mark.parametrize("name", TASKS)
def test_oracle_fixes_the_task_and_doing_nothing_does_not(tmp_path, name):
    task = REPOS / name
    fixed = run_trial(task, tmp_path / "oracle", "oracle")
    assert fixed.exception_info is None, fixed.exception_info
    assert fixed.verifier_result is not None and fixed.verifier_result.rewards == {"reward": 1.0}
    untouched = run_trial(task, tmp_path / "nop", "nop")
    assert untouched.exception_info is None, untouched.exception_info
    assert untouched.verifier_result is not None
    assert untouched.verifier_result.rewards == {"reward": 0.0}
    # The grader's reasons: the bug fails exactly as many tests as the task names
    # fail-to-pass, and the fix passes every one (`tests/grade_junit_report.py`).
    expected = json.loads((task / "tests" / "expected_outcomes.json").read_text())
    fixed_line = grading(tmp_path / "oracle", fixed.trial_name)
    assert fixed_line.startswith("reward 1: ")
    assert f"({expected['passing_tests']} passed, 0 failed, 0 errors" in fixed_line
    failed = f"reward 0: {len(expected['fail_to_pass'])} failed and 0 errors: "
    assert grading(tmp_path / "nop", untouched.trial_name).startswith(failed)


def grading(trials_dir: Path, trial_name: str) -> str:
    return (trials_dir / trial_name / "verifier" / "grading.txt").read_text()
