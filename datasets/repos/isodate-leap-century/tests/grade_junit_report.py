"""Grade a repository task from pytest's JUnit report, never from pytest's exit status.

The code under test is the attempt's, and it runs inside pytest, so it can choose
pytest's exit status (an `atexit` hook calling `os._exit(0)` turns a failing run into
status 0). The per-test outcomes pytest writes into its JUnit report at the end of its
session are what this grader reads instead. `test.sh` points `--junitxml` into a
directory it has just made with `mktemp -d`, so a report found there was written by
this run, and runs this file with `python3 -I`: no PYTHON* variable, user
site-packages or the script's directory reaches the grader, which imports only the
standard library.

    python3 -I grade_junit_report.py REPORT EXPECTED_OUTCOMES VERIFIER_DIR

Reward 1 only if the report exists and parses, nothing in it failed or errored, every
fail-to-pass test named in EXPECTED_OUTCOMES appears and passed (a skip is not a pass),
and at least `passing_tests` tests passed (the selection's size on the fixed code).
Otherwise reward 0. Either way VERIFIER_DIR/grading.txt gets one line saying why, and
VERIFIER_DIR/reward.txt the reward, written last.

An EXPECTED_OUTCOMES that cannot be read is the task's fault, not the attempt's: the
grader then writes no reward and exits 2, with the reason in grading.txt.

Every repository task ships a byte-identical copy of this file in its `tests/`
(`tests/test_repo_task_grading.py` checks that they are): change them together.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

SHOWN = 3  # test names quoted in a reason line before "and N more"


class TaskError(Exception):
    """The task's own grading inputs are wrong; no reward should be written."""


@dataclass(frozen=True)
class Expected:
    passing_tests: int
    fail_to_pass: list[str]


@dataclass
class Outcomes:
    """Per-test outcomes, keyed as pytest's JUnit report names tests: (classname, name)."""

    by_test: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    suite_failures: int = 0
    suite_errors: int = 0

    def with_outcome(self, outcome: str) -> list[tuple[str, str]]:
        return [key for key, seen in self.by_test.items() if outcome in seen]

    def passed(self) -> list[tuple[str, str]]:
        return [key for key, seen in self.by_test.items() if seen == {"passed"}]


def load_expected(path: Path) -> Expected:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        passing_tests = document["passing_tests"]
        fail_to_pass = document["fail_to_pass"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise TaskError(f"cannot read the expected outcomes {path}: {error}") from error
    if not (isinstance(passing_tests, int) and passing_tests > 0):
        raise TaskError(f"{path}: passing_tests must be a positive integer, not {passing_tests!r}")
    if not (
        isinstance(fail_to_pass, list)
        and fail_to_pass
        and all(isinstance(node, str) and "::" in node for node in fail_to_pass)
    ):
        raise TaskError(f"{path}: fail_to_pass must be a non-empty list of pytest node ids")
    return Expected(passing_tests, fail_to_pass)


def junit_key(node_id: str) -> tuple[str, str]:
    """The (classname, name) pytest's junitxml plugin gives the test `node_id`: the
    file's path dotted without `.py`, then any classes; parameters kept in the name
    (`_pytest.junitxml.mangle_test_address`)."""
    path, bracket, params = node_id.partition("[")
    names = path.split("::")
    names[0] = names[0].replace("/", ".").removesuffix(".py")
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def read_report(path: Path) -> Outcomes:
    """The outcomes in the report at `path`; ValueError says why there are none."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        raise ValueError(
            "pytest wrote no JUnit report: it crashed, hung or was made to exit "
            "before its session finished"
        ) from None
    except OSError as error:
        raise ValueError(f"the JUnit report cannot be read ({error})") from None
    if not stat.S_ISREG(status.st_mode):
        raise ValueError("the JUnit report is not a regular file")
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as error:
        raise ValueError(f"the JUnit report cannot be read as XML ({error})") from None
    if root.tag not in ("testsuite", "testsuites"):
        raise ValueError(f"the JUnit report is not one: its root element is <{root.tag}>")
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    outcomes = Outcomes()
    for suite in suites:
        outcomes.suite_failures += _count(suite, "failures")
        outcomes.suite_errors += _count(suite, "errors")
        for case in suite.iter("testcase"):
            key = (case.get("classname", ""), case.get("name", ""))
            outcomes.by_test.setdefault(key, set()).add(_outcome(case))
    return outcomes


def _count(suite: ElementTree.Element, attribute: str) -> int:
    try:
        return int(suite.get(attribute, "0"))
    except ValueError:
        raise ValueError(f"the JUnit report's {attribute} count is not a number") from None


def _outcome(case: ElementTree.Element) -> str:
    """One test case's outcome; a failure or error outranks anything else recorded."""
    children = {child.tag for child in case}
    for outcome in ("error", "failure", "skipped"):
        if outcome in children:
            return outcome
    return "passed"


def grade(outcomes: Outcomes, expected: Expected) -> str | None:
    """Why the outcomes earn no reward, or None when they earn it."""
    failed = outcomes.with_outcome("failure")
    errors = outcomes.with_outcome("error")
    if failed or errors:
        return f"{len(failed)} failed and {len(errors)} errors: {_names(failed + errors)}"
    if outcomes.suite_failures or outcomes.suite_errors:
        return (
            f"the report counts {outcomes.suite_failures} failures and "
            f"{outcomes.suite_errors} errors that no test case records"
        )
    for node_id in expected.fail_to_pass:
        seen = outcomes.by_test.get(junit_key(node_id))
        if seen is None:
            return f"fail-to-pass test {_inert(node_id)} is missing from the report"
        if seen != {"passed"}:
            return f"fail-to-pass test {_inert(node_id)} did not pass ({', '.join(sorted(seen))})"
    passed = len(outcomes.passed())
    if passed < expected.passing_tests:
        return f"only {passed} tests passed, at least {expected.passing_tests} expected"
    return None


def _names(keys: list[tuple[str, str]]) -> str:
    shown = ", ".join(
        _inert(f"{classname}::{name}" if classname else name) for classname, name in keys[:SHOWN]
    )
    more = len(keys) - SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _inert(text: str) -> str:
    """`text` on one line, with control and non-ASCII characters as escapes."""
    return text.encode("unicode_escape").decode("ascii")


def summary(outcomes: Outcomes) -> str:
    counts = {"passed": 0, "failure": 0, "error": 0, "skipped": 0}
    for seen in outcomes.by_test.values():
        for outcome in seen:
            counts[outcome] += 1
    return (
        f"{counts['passed']} passed, {counts['failure']} failed, "
        f"{counts['error']} errors, {counts['skipped']} skipped"
    )


def main(arguments: list[str]) -> int:
    if len(arguments) != 3:
        print("usage: grade_junit_report.py REPORT EXPECTED_OUTCOMES VERIFIER_DIR", file=sys.stderr)
        return 2
    report, expected_path, verifier_dir = (Path(argument) for argument in arguments)
    try:
        expected = load_expected(expected_path)
    except TaskError as error:
        print(f"grade_junit_report.py: {error}; no reward written", file=sys.stderr)
        return 2
    try:
        outcomes = read_report(report)
    except ValueError as error:
        reward, line = 0, f"reward 0: {error}"
    else:
        reason = grade(outcomes, expected)
        reward = 0 if reason else 1
        line = f"reward {reward}: {reason or 'every test passed, fail-to-pass ones included'}"
        line += f" ({summary(outcomes)}; {len(expected.fail_to_pass)} fail-to-pass)"
    verifier_dir.mkdir(parents=True, exist_ok=True)
    (verifier_dir / "grading.txt").write_text(line + "\n", encoding="utf-8")
    (verifier_dir / "reward.txt").write_text(f"{reward}\n", encoding="utf-8")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
