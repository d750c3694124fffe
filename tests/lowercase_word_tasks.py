"""A CI-sized task family the untrained learner already solves sometimes.

Each task asks for a one-word reply made of lowercase ASCII letters; the built-in agent
writes its last reply to `/app/answer.txt` (`--answer-file`) and the verifier checks it
with a regular expression. About a fifth of the seeded learner's single sampled tokens
pass (leading space aside), so GRPO has mixed groups from the first batch and learns
from rewards alone, with no demonstration.
"""

from __future__ import annotations

from pathlib import Path

PHRASINGS = (
    "Reply with one word written in lowercase letters a to z only.",
    "Answer with a single lowercase English word, nothing else.",
    "Say one word. Use only the letters a-z, all lowercase.",
    "Give a one-word reply in lowercase ASCII letters.",
    "Respond with exactly one word; lowercase letters only.",
    "Type a single word made only of the characters a through z.",
    "One word, please, in small letters from a to z.",
    "Write back one lowercase word and no punctuation.",
)

TEST_SH = """#!/bin/bash
# Harbor reads only the reward file: every outcome must end by writing it.
mkdir -p /logs/verifier
if timeout 20 python3 -c 'import re, sys; from pathlib import Path
sys.exit(re.fullmatch("[a-z]+", Path(sys.argv[1]).read_text().strip()) is None)' \\
    /app/answer.txt; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""

TASK_TOML = """schema_version = "1.4"
artifacts = ["/app/answer.txt"]

[task]
name = "synth/lowercase-word-{index:02d}"
description = "Reply with one lowercase word."

[verifier]
environment_mode = "separate"
timeout_sec = 30

[agent]
timeout_sec = 60

[environment]
cpus = 1
memory_mb = 256
storage_mb = 64
network_mode = "no-network"
"""

PROFILE = {
    "name": "test/word-replier",
    "version": "1",
    "description": "The built-in agent on the seeded learner: one reply of one token, "
    "recorded as the answer.",
    "engine": "builtin",
    "model": "synth/qwen3-learner",
    "args": ["--max-steps", "1", "--max-tokens", "1", "--answer-file", "/app/answer.txt"],
    "instruction": {"mode": "stdin"},
}


def lowercase_word_dataset(directory: Path) -> Path:
    for index, phrasing in enumerate(PHRASINGS):
        task = directory / f"lowercase-word-{index:02d}"
        (task / "environment" / "app").mkdir(parents=True)
        (task / "environment" / "Dockerfile").write_text(
            "FROM python:3.11-slim\nWORKDIR /app\nCOPY app/ /app/\n"
        )
        (task / "environment" / "app" / "answer.txt").write_text("")
        (task / "tests").mkdir()
        (task / "tests" / "test.sh").write_text(TEST_SH)
        (task / "tests" / "test.sh").chmod(0o755)
        (task / "instruction.md").write_text(phrasing + "\n")
        (task / "task.toml").write_text(TASK_TOML.format(index=index))
    return directory
