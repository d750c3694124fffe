#!/bin/bash
# Harbor ignores this script's exit code and reads only the reward file. The
# reward comes from the per-test outcomes in pytest's JUnit report, never from
# pytest's exit status: the code under test is the attempt's and runs inside
# pytest, so it can choose that status (an atexit hook calling os._exit(0)).
# The report goes into a directory made just now, so no attempt can have put
# one there, and grade_junit_report.py (run with -I: no PYTHON* variable or
# user site-packages reaches it) writes reward 1 only if nothing failed and
# every fail-to-pass test in expected_outcomes.json passed, else 0, with the
# reason in /logs/verifier/grading.txt. A crash or a hang leaves no report: 0.
# The selection is the project's own tests for the broken behaviour; in the
# separate verifier they come from the image, and only /app/inflection comes from
# the attempt.
mkdir -p /logs/verifier
tests=$(dirname "$0")
report_dir=$(mktemp -d) || exit 1
(cd /app && PYTHONDONTWRITEBYTECODE=1 timeout 60 python3 -m pytest -p no:cacheprovider -q --junitxml="$report_dir/junit.xml" test_inflection.py)
python3 -I "$tests/grade_junit_report.py" "$report_dir/junit.xml" "$tests/expected_outcomes.json" /logs/verifier
