#!/bin/bash
# Harbor ignores this script's exit code and reads only the reward file,
# so every outcome, including a hang or a crash, must end by writing it.
mkdir -p /logs/verifier
# Surrounding whitespace (the newline `echo` adds) does not count; anything else does.
if timeout 20 python3 -c 'import sys; from pathlib import Path
sys.exit(Path(sys.argv[1]).read_text().strip() != sys.argv[2])' /app/answer.txt red; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
