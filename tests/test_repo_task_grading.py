"""A repository task's reward comes from the per-test outcomes in pytest's JUnit report,
never from pytest's exit status, which the attempt's code chooses: it runs inside pytest.

The grader every `datasets/repos/` task ships (`tests/grade_junit_report.py`) is run
here as `test.sh` runs it, on crafted reports; then real Harbor trials of the boltons
task, on the sandbox with its separate verifier, play attempts that leave the bug (or
half of it) in place and make pytest exit 0 or report nothing for the fail-to-pass test:
each is graded 0, and the real fix 1."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_support import isolated_state, requires_cgroups, run_trial

REPOS = Path(__file__).resolve().parent.parent / "datasets" / "repos"
TASKS = sorted(path for path in REPOS.iterdir() if (path / "task.toml").is_file())
GRADER = REPOS / "boltons-parse-int-list" / "tests" / "grade_junit_report.py"

FIXED = "tests/test_calc.py::CalcTests::test_sum[1-2]"
EXPECTED = {"passing_tests": 3, "fail_to_pass": [FIXED]}
# How pytest's junitxml plugin names the tests of tests/test_calc.py.
PASSED = '<testcase classname="tests.test_calc" name="test_{0}" time="0.001" />'
FIXED_PASSED = '<testcase classname="tests.test_calc.CalcTests" name="test_sum[1-2]" />'
FIXED_SKIPPED = (
    '<testcase classname="tests.test_calc.CalcTests" name="test_sum[1-2]">'
    '<skipped type="pytest.skip" message="not now">skipped</skipped></testcase>'
)
FAILED = (
    '<testcase classname="tests.test_calc" name="test_mul">'
    '<failure message="assert 2 == 3">assert 2 == 3</failure></testcase>'
)
COLLECTION_ERROR = (
    '<testcase classname="" name="tests.test_calc">'
    '<error message="collection failure">ImportError</error></testcase>'
)


def junit(*cases: str, failures: int = 0, errors: int = 0) -> str:
    """A report shaped as pytest 8 writes one (`--junitxml`, xunit2)."""
    return (
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
        f'<testsuite name="pytest" errors="{errors}" failures="{failures}" skipped="0" '
        f'tests="{len(cases)}" time="0.1" hostname="h">{"".join(cases)}</testsuite></testsuites>'
    )


def grade(tmp_path: Path, report: str | None, expected: object = EXPECTED) -> tuple[str, str]:
    """Run the shipped grader as test.sh does; (reward, grading line)."""
    report_path = tmp_path / "report" / "junit.xml"
    report_path.parent.mkdir()
    if report is not None:
        report_path.write_text(report)
    expected_path = tmp_path / "expected_outcomes.json"
    expected_path.write_text(json.dumps(expected))
    verifier = tmp_path / "verifier"
    subprocess.run(
        [sys.executable, "-I", GRADER, report_path, expected_path, verifier],
        check=True,
        capture_output=True,
    )
    reward = (verifier / "reward.txt").read_text().strip()
    line = (verifier / "grading.txt").read_text()
    assert line.count("\n") == 1 and line.startswith(f"reward {reward}: ")
    return reward, line


def test_every_repository_task_ships_the_same_grader_and_uses_it():
    for task in TASKS:
        tests = task / "tests"
        assert (tests / "grade_junit_report.py").read_bytes() == GRADER.read_bytes(), task.name
        script = (tests / "test.sh").read_text()
        assert '--junitxml="$report_dir/junit.xml"' in script and "mktemp -d" in script
        assert 'python3 -I "$tests/grade_junit_report.py"' in script
        assert "reward.txt" not in script, "only the grader writes the reward"
        expected = json.loads((tests / "expected_outcomes.json").read_text())
        assert expected["passing_tests"] >= len(expected["fail_to_pass"]) > 0


def test_a_clean_report_with_every_fail_to_pass_test_passing_earns_1(tmp_path):
    reward, line = grade(tmp_path, junit(PASSED.format("add"), PASSED.format("mul"), FIXED_PASSED))
    assert reward == "1"
    assert "3 passed, 0 failed" in line


def test_no_report_earns_0_whatever_pytest_exited_with(tmp_path):
    reward, line = grade(tmp_path, None)
    assert reward == "0" and "wrote no JUnit report" in line


@pytest.mark.parametrize(
    ("report", "reason"),
    [
        (junit(PASSED.format("add"), FAILED, FIXED_PASSED, failures=1), "1 failed"),
        (junit(PASSED.format("add"), PASSED.format("mul"), FIXED_PASSED, COLLECTION_ERROR,
               errors=1), "1 errors"),
        (junit(PASSED.format("add"), PASSED.format("mul"), FIXED_PASSED, failures=2),
         "no test case records"),
        (junit(PASSED.format("add"), PASSED.format("mul"), FIXED_SKIPPED),
         f"fail-to-pass test {FIXED} did not pass (skipped)"),
        (junit(PASSED.format("add"), PASSED.format("mul"), PASSED.format("div")),
         f"fail-to-pass test {FIXED} is missing"),
        (junit(PASSED.format("add"), FIXED_PASSED), "only 2 tests passed, at least 3 expected"),
        (junit(), f"fail-to-pass test {FIXED} is missing"),
        ("<testsuites><testsuite>", "cannot be read as XML"),
        ('<?xml version="1.0"?><html/>', "root element is <html>"),
    ],
    ids=["failure", "error", "counted-failures", "skipped-f2p", "missing-f2p", "too-few",
         "empty", "truncated", "not-junit"],
)  # fmt: skip
def test_a_report_short_of_the_fix_earns_0_and_says_why(tmp_path, report, reason):
    reward, line = grade(tmp_path, report)
    assert reward == "0"
    assert reason in line


def test_a_report_that_is_a_link_earns_0(tmp_path):
    real = tmp_path / "elsewhere.xml"
    real.write_text(junit(PASSED.format("add"), PASSED.format("mul"), FIXED_PASSED))
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "junit.xml").symlink_to(real)
    expected = tmp_path / "expected_outcomes.json"
    expected.write_text(json.dumps(EXPECTED))
    verifier = tmp_path / "verifier"
    graded = [sys.executable, "-I", GRADER, tmp_path / "report" / "junit.xml", expected, verifier]
    subprocess.run(graded, check=True, capture_output=True)
    assert (verifier / "reward.txt").read_text() == "0\n"
    assert "not a regular file" in (verifier / "grading.txt").read_text()


def test_unreadable_expected_outcomes_write_no_reward(tmp_path):
    """A broken task is the task's fault: Harbor then records a task error, not a 0."""
    report = junit(PASSED.format("add"), PASSED.format("mul"), FIXED_PASSED)
    with pytest.raises(subprocess.CalledProcessError) as refused:
        grade(tmp_path, report, expected={"passing_tests": 3, "fail_to_pass": []})
    assert refused.value.returncode == 2
    assert b"fail_to_pass must be a non-empty list" in refused.value.stderr
    assert not (tmp_path / "verifier" / "reward.txt").exists()


# Attempts at the boltons task (the bug: parse_int_list drops each range's upper end).
# Each is the agent's whole work, played by Harbor's oracle agent as solution/solve.sh,
# with the reason its grading line must give. Graded by pytest's exit status, every one
# of them earned 1.
F2P = "tests/test_strutils.py::test_parse_int_list"
FAILED_F2P = "1 failed and 0 errors: tests.test_strutils::test_parse_int_list"
BUG_LINE = "list(range(min(range_limits), max(range_limits)))"
PARTIAL_FIX = "list(range(range_limits[0], range_limits[-1] + 1))"
EXIT_0_AT_EXIT = """\
cat >> /app/boltons/strutils.py <<'EOF'

import atexit as _atexit, os as _os
_atexit.register(lambda: _os._exit(0))
EOF
"""
ATTACKS = {
    # The probe's attack: "1 failed, 26 passed", yet pytest exits 0.
    "exit-0-at-exit": (EXIT_0_AT_EXIT, FAILED_F2P),
    # Fixed for "5-8" but not for "8-5", and the same exit.
    "partial-fix-exit-0-at-exit": (
        f"sed -i 's/{BUG_LINE}/{PARTIAL_FIX}/' /app/boltons/strutils.py\n"
        f"grep -qF '{PARTIAL_FIX}' /app/boltons/strutils.py\n{EXIT_0_AT_EXIT}",
        FAILED_F2P,
    ),
    # pytest exits 0 while collecting: no test runs, no report.
    "exit-0-on-import": (
        """\
cat >> /app/boltons/__init__.py <<'EOF'

import os as _os, sys as _sys
if "pytest" in _sys.modules:
    _os._exit(0)
EOF
""",
        "pytest wrote no JUnit report",
    ),
    # The test module is skipped whole: "1 skipped", exit 0.
    "skip-the-module": (
        """\
cat >> /app/boltons/strutils.py <<'EOF'

import sys as _sys
if "pytest" in _sys.modules:
    _sys.modules["pytest"].skip("not on this platform", allow_module_level=True)
EOF
""",
        f"fail-to-pass test {F2P} is missing from the report",
    ),
    # Only the fail-to-pass test is skipped: "1 skipped, 26 passed", exit 0.
    "skip-the-fail-to-pass-test": (
        """\
cat >> /app/boltons/strutils.py <<'EOF'

import sys as _sys
_parse_int_list = parse_int_list
def parse_int_list(*args, **kwargs):
    if "pytest" in _sys.modules:
        _sys.modules["pytest"].skip("not on this platform")
    return _parse_int_list(*args, **kwargs)
EOF
""",
        f"fail-to-pass test {F2P} did not pass (skipped)",
    ),
}


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def attempt(tmp_path: Path, solve_sh: str | None) -> tuple[float, str]:
    """The reward and grading line of a trial whose agent runs `solve_sh` (the task's
    own solution when None)."""
    task = tmp_path / "boltons-parse-int-list"
    shutil.copytree(REPOS / task.name, task)
    if solve_sh is not None:
        (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\nset -euo pipefail\n{solve_sh}")
    result = run_trial(task, tmp_path / "trials", "oracle")
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result is not None and result.verifier_result.rewards is not None
    grading = tmp_path / "trials" / result.trial_name / "verifier" / "grading.txt"
    line = grading.read_text() if grading.exists() else "(the verifier wrote no grading.txt)"
    return result.verifier_result.rewards["reward"], line


@requires_cgroups
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_attempt_that_leaves_the_fail_to_pass_test_unpassed_earns_0(tmp_path, state_dir, name):
    solve_sh, reason = ATTACKS[name]
    reward, grading = attempt(tmp_path, solve_sh)
    assert reward == 0.0, grading
    assert grading.startswith(f"reward 0: {reason}"), grading


@requires_cgroups
@pytest.mark.slow
def test_the_real_fix_earns_1(tmp_path, state_dir):
    reward, grading = attempt(tmp_path, None)
    assert reward == 1.0, grading
    assert grading.startswith("reward 1: every test passed") and "27 passed" in grading
