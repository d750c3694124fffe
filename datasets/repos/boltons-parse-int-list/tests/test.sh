#!/bin/bash
# Harbor ignores this script's exit code and reads only the reward file,
# so every outcome, including a hang or a crash, must end by writing it.
# The selection is the project's own tests for the broken behaviour; in the
# separate verifier they come from the image, and only /app/boltons comes from
# the attempt.
mkdir -p /logs/verifier
if cd /app && PYTHONDONTWRITEBYTECODE=1 timeout 60 python3 -m pytest -p no:cacheprovider -q tests/test_strutils.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
