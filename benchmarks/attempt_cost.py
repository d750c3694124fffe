"""What an attempt and an image build cost on this tree against a baseline commit.

One Harbor trial (the oracle agent, a verifier that shares the agent's sandbox, as
Harbor's default mode does) in the bubblewrap sandbox, three ways: on the host root (a
Dockerfile with no RUN step), on an image whose layers are cached, and on an image with
one new RUN step (a nonce, so the step is built each time: the build as an attempt pays
it). Each measurement is a fresh interpreter running the trial from one tree (this
checkout, or the baseline commit checked out beside it in a temporary `git worktree`),
the two trees interleaved, with the trees' own state directories. Printed: the median
seconds per tree and way, and the ratio current/baseline.

    .venv/bin/python -m benchmarks.attempt_cost [--baseline COMMIT] [--reps 5]

Needs root, bubblewrap and the base image the sandbox tests use (`python:3.11-slim`,
built once into the image cache).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.baseline_tree import PROJECT_ROOT, baseline_tree, remove_tree

WAYS = ("host root", "cached image", "new RUN step")
HOST_DOCKERFILE = "FROM python:3.11-slim\nWORKDIR /app\nENV GREETING=hello\n"
IMAGE_DOCKERFILE = (
    "FROM python:3.11-slim\nRUN echo {nonce} > /nonce\nWORKDIR /app\nENV GREETING=hello\n"
)
TASK_TOML = """\
schema_version = "1.4"
artifacts = ["/app/hello.txt"]

[task]
name = "bench/{name}"

[agent]
timeout_sec = 120

[verifier]
environment_mode = "shared"
timeout_sec = 120
"""
SOLVE_SH = '#!/bin/bash\necho "$GREETING" > /app/hello.txt\n'
TEST_SH = """\
#!/bin/bash
if [ "$(cat /app/hello.txt 2>/dev/null)" = hello ]; then echo 1; else echo 0; fi \\
  > /logs/verifier/reward.txt
"""
# Run by a fresh interpreter from one tree: one trial, its wall seconds and reward.
CHILD = """
import asyncio, json, sys, time
from harbor import Trial, TrialConfig
from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig
from synth_pipelines.config import Settings
from synth_pipelines.sandbox.options import HostSettings
from synth_pipelines.sandbox.verification import isolate_verification

task, trials = sys.argv[1], sys.argv[2]
settings = HostSettings.model_validate(Settings(), from_attributes=True)
config = TrialConfig(
    task=TaskConfig(path=task),
    trials_dir=trials,
    agent=AgentConfig(name="oracle"),
    environment=EnvironmentConfig(
        import_path="synth_pipelines.sandbox.bwrap:BwrapEnvironment",
        kwargs=settings.model_dump(mode="json"),
    ),
)

async def run():
    trial = await Trial.create(config)
    isolate_verification(trial)
    return await trial.run()

started = time.perf_counter()
result = asyncio.run(run())
seconds = time.perf_counter() - started
rewards = result.verifier_result.rewards if result.verifier_result else None
error = result.exception_info.exception_type if result.exception_info else None
print(json.dumps({"seconds": seconds, "rewards": rewards, "error": error}))
"""


def _task(root: Path, name: str, dockerfile: str) -> Path:
    task = root / name
    for folder in ("environment", "tests", "solution"):
        (task / folder).mkdir(parents=True)
    (task / "task.toml").write_text(TASK_TOML.format(name=name))
    (task / "instruction.md").write_text("Write hello into /app/hello.txt.\n")
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "solution" / "solve.sh").write_text(SOLVE_SH)
    (task / "tests" / "test.sh").write_text(TEST_SH)
    return task


def _trial(tree: Path, task: Path, work: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "SYNTH_DATA_DIR": str(work / "state")}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(task), str(work / "trials")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"trial from {tree} exited {done.returncode}: {done.stderr[-2000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if found["error"] is not None or found["rewards"] != {"reward": 1.0}:
        raise RuntimeError(f"trial from {tree} did not pass: {found}")
    return float(found["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD", help="the commit to compare against")
    parser.add_argument("--reps", type=int, default=5, help="trials per tree and way")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="attempt-cost-") as scratch:
        root = Path(scratch)
        baseline = baseline_tree(args.baseline, root)
        trees = {"baseline": baseline, "current": PROJECT_ROOT}
        seconds: dict[str, dict[str, list[float]]] = {
            name: {way: [] for way in WAYS} for name in trees
        }
        try:
            cached = _task(root, "cached", IMAGE_DOCKERFILE.format(nonce="cached"))
            host = _task(root, "host", HOST_DOCKERFILE)
            for name, tree in trees.items():  # build the cached image once per tree
                _trial(tree, cached, root / name)
            for rep in range(args.reps):
                for name, tree in trees.items():
                    work = root / name
                    fresh = _task(
                        root,
                        f"fresh-{name}-{rep}",
                        IMAGE_DOCKERFILE.format(nonce=secrets.token_hex(8)),
                    )
                    for way, task in zip(WAYS, (host, cached, fresh), strict=True):
                        seconds[name][way].append(_trial(tree, task, work))
                print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)
        finally:
            remove_tree(baseline)
    print(f"one shared-verifier oracle trial, median of {args.reps} (baseline {args.baseline})")
    print(f"{'way':<14} {'baseline s':>11} {'current s':>10} {'ratio':>7}")
    for way in WAYS:
        before = statistics.median(seconds["baseline"][way])
        after = statistics.median(seconds["current"][way])
        print(f"{way:<14} {before:>11.2f} {after:>10.2f} {after / before:>7.2f}")


if __name__ == "__main__":
    main()
