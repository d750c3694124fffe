"""Trivial Harbor tasks for scale runs: the smallest instruction and a one-file verifier.

Each task asks for one line in one file; its verifier checks that file and nothing else,
and its solution writes it, so Harbor's oracle passes every task and costs the least a
real trial can cost.
"""

from __future__ import annotations

from pathlib import Path

TASK_TOML = """schema_version = "1.4"

[task]
name = "scale/{name}"
description = "Write one line into one file."

# Generous: a host shared with other work can slow an agent's start-up many times over,
# and a timed-out attempt would measure the host, not the platform.
[verifier]
timeout_sec = 300

[agent]
timeout_sec = 600

[environment]
cpus = 1
memory_mb = 256
storage_mb = 64
network_mode = "no-network"
"""

VERIFIER = """#!/bin/bash
# Harbor reads only the reward file, so every outcome must end by writing it.
mkdir -p /logs/verifier
if [ "$(cat /app/answer.txt 2>/dev/null)" = "{answer}" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def task_name(index: int) -> str:
    return f"line-{index:05d}"


def write_task(directory: Path, index: int) -> Path:
    name = task_name(index)
    answer = f"line {index}"
    task = directory / name
    for part in ("environment", "tests", "solution"):
        (task / part).mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text(TASK_TOML.format(name=name))
    (task / "instruction.md").write_text(f"Write `{answer}` into /app/answer.txt.\n")
    (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (task / "tests" / "test.sh").write_text(VERIFIER.format(answer=answer))
    (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\necho '{answer}' > /app/answer.txt\n")
    for script in (task / "tests" / "test.sh", task / "solution" / "solve.sh"):
        script.chmod(0o755)
    return task


def write_dataset(directory: Path, count: int) -> Path:
    """`count` trivial tasks in `directory`, one subdirectory each."""
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        write_task(directory, index)
    return directory
