"""Real Harbor trials on the sandbox: oracle, nop, separate verifier and regrade."""

from __future__ import annotations

import pytest
from harbor.models.trial.config import SourceTrialConfig
from sandbox_support import isolated_state, make_task, run_trial, sandbox_dirs

# A later test script that only accepts "HELLO": the same rollout grades differently.
STRICT_TEST_SH = """\
#!/bin/bash
if [ "$(cat /app/hello.txt 2>/dev/null)" = HELLO ]; then echo 1; else echo 0; fi \\
  > /logs/verifier/reward.txt
"""


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def test_oracle_passes_and_nop_fails_with_a_separate_verifier(tmp_path):
    task = make_task(tmp_path)
    oracle = run_trial(task, tmp_path / "trials", "oracle")
    nop = run_trial(task, tmp_path / "trials", "nop")
    assert oracle.exception_info is None, oracle.exception_info
    assert oracle.verifier_result.rewards == {"reward": 1.0}
    assert oracle.verifier_environment_mode == "separate"
    assert nop.verifier_result.rewards == {"reward": 0.0}
    assert sandbox_dirs() == []


def test_regrade_rescoring_a_recorded_trial_with_new_tests(tmp_path):
    task = make_task(tmp_path)
    source = run_trial(task, tmp_path / "trials", "oracle")
    source_dir = tmp_path / "trials" / source.trial_name
    (task / "tests" / "test.sh").write_text(STRICT_TEST_SH)
    regraded = run_trial(
        task,
        tmp_path / "regrades",
        "oracle",
        source_trial=SourceTrialConfig(action="regrade", type="local", path=source_dir),
    )
    assert regraded.exception_info is None, regraded.exception_info
    assert regraded.verifier_result.rewards == {"reward": 0.0}
    assert source.verifier_result.rewards == {"reward": 1.0}
    assert sandbox_dirs() == []


def test_bundled_tests_are_copied_to_tests_for_a_separate_verifier(tmp_path):
    task = make_task(tmp_path)
    (task / "tests" / "Dockerfile").write_text("FROM python:3.12-slim\nWORKDIR /app\n")
    result = run_trial(task, tmp_path / "trials", "oracle")
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": 1.0}
