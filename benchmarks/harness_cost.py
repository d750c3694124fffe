"""What an attempt costs with Claude Code against the built-in agent, side by side.

One run of the embedded platform (started as `synth up` starts it, the model service
scripted) evaluates the same trivial tasks with each harness profile in turn: the
built-in agent (`profiles/builtin.json`) and the real Claude Code CLI
(`profiles/claude-code.json`). Both get the same two scripted replies in the model's own
format, a tool call that writes the task's answer and then a final sentence, and both are
scored by the model itself (the scripted text is forced; its logprobs, and the prefill of
each prompt, are computed), so each attempt makes two model calls through the proxy.

Printed per harness: wall time of the run (its one batch, from acceptance), CPU seconds
per attempt of every platform process and everything they started (sandboxes,
harnesses, verifiers, run workers), model calls and prompt tokens per attempt, and the
pass rate; then each Claude Code variant's ratios to the built-in agent, the baseline.
The variants are the shipped profile and the same with Claude Code's `--bare`, a
one-line `--system-prompt` and `--tools Bash`.

    .venv/bin/python -m benchmarks.harness_cost [--tasks 16] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.platform_services import Platform, start_platform, tear_down
from benchmarks.process_cpu import tree_cpu_sec
from benchmarks.trivial_tasks import write_dataset
from synth_pipelines.config import Settings
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.plan import EvalPlan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest, batch_key
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import accept_run, get_run
from synth_pipelines.control.schema import evidence_calls
from synth_pipelines.control.table_outputs import load_table
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.registry.datasets import publish_dataset
from synth_pipelines.storage.objectstore import open_object_store

# harness: (profile file, extra arguments, the tool that writes the answer)
HARNESSES = {
    "built-in": ("builtin.json", [], "bash"),
    "claude-code": ("claude-code.json", [], "Bash"),
    # Claude Code's own switches for a short request: no CLAUDE.md discovery, hooks or
    # plugins, a one-line system prompt, and only the Bash tool defined.
    "claude --bare": (
        "claude-code.json",
        ["--bare", "--system-prompt", "You are terse.", "--tools", "Bash"],
        "Bash",
    ),
}
TIMEOUT_SEC = 1800.0


def _tool_call(tool: str, index: int) -> str:
    command = f"echo 'line {index}' > /app/answer.txt"
    arguments = {"command": command}
    if tool == "Bash":
        arguments["description"] = "write the answer"
    return (
        "<think>\nOne command writes the answer.\n</think>\n\n<tool_call>\n"
        + json.dumps({"name": tool, "arguments": arguments})
        + "\n</tool_call>"
    )


def script(tool: str, tasks: int) -> list[dict]:
    """A final sentence once a tool result is in the prompt, else the task's tool call."""
    final = {"match": "<tool_response>", "completion": "Done.", "repeat": True}
    calls = [
        {"match": f"`line {index}`", "completion": _tool_call(tool, index), "repeat": True}
        for index in range(tasks)
    ]
    return [final, *calls]


@dataclass(frozen=True)
class Measured:
    harness: str
    attempts: int
    passed: int
    wall_sec: float
    cpu_sec: float
    calls: int
    prompt_tokens: int

    @property
    def cpu_per_attempt(self) -> float:
        return self.cpu_sec / self.attempts

    def per_attempt(self, value: int) -> float:
        return value / self.attempts


def _profile(name: str, extra_args: list[str]) -> PinnedProfile:
    document = json.loads((Settings().project_root / "profiles" / name).read_text())
    if extra_args:
        document = {**document, "version": "bench", "args": [*document["args"], *extra_args]}
    return PinnedProfile.from_document(document)


def _evaluate(platform: Platform, dataset: DatasetPin, harness: str, concurrency: int) -> Measured:
    profile_file, extra_args, tool = HARNESSES[harness]
    platform.set_script(script(tool, dataset.task_count))
    engine = control_engine(Settings())
    request = RunRequest(
        owner=Settings().owner,
        dataset=dataset,
        actor=_profile(profile_file, extra_args),
        plan=EvalPlan(
            kind="eval",
            attempts_per_task=1,
            tasks_per_batch=dataset.task_count,
            budget={
                "max_active_attempts": concurrency,
                "cpus": concurrency,
                "memory_mb": 1024 * concurrency,
                "storage_mb": 64 * concurrency,
            },
        ),
    )
    cpu = tree_cpu_sec(list(platform.pids.values()))
    started = time.monotonic()
    run = accept_run(engine, request, org="local")[0]
    while not get_run(engine, run.run_id).finished:
        if time.monotonic() - started > TIMEOUT_SEC:
            raise RuntimeError(f"{harness}: run {run.run_id} did not finish in {TIMEOUT_SEC} s")
        time.sleep(1.0)
    wall = time.monotonic() - started
    # Run workers have exited by now, so what they and their sandboxes used is reaped.
    cpu_sec = tree_cpu_sec(list(platform.pids.values())) - cpu
    record = get_run(engine, run.run_id)
    if record.status != "succeeded":
        raise RuntimeError(f"{harness}: run {run.run_id} {record.status}")
    store = open_object_store(Settings().objects_url)
    assessments = Assessment.from_table(
        load_table(engine, store, "assessments", batch_key(run.run_id, 0))
    )
    with engine.connect() as conn:
        attempts = sorted(
            {
                row.attempt_id
                for row in conn.execute(
                    evidence_calls.select().where(evidence_calls.c.run_id == run.run_id)
                )
            }
        )
    evidence = read_attempt_evidence(engine, store, attempts)
    calls = [call for attempt in attempts for call in evidence.calls[attempt]]
    return Measured(
        harness=harness,
        attempts=dataset.task_count,
        passed=sum(1 for assessment in assessments if assessment.reward == 1.0),
        wall_sec=wall,
        cpu_sec=cpu_sec,
        calls=len(calls),
        prompt_tokens=sum(len(call.prompt_tokens) for call in calls),
    )


def report(rows: list[Measured]) -> None:
    print(
        f"{'harness':<12} {'attempts':>8} {'passed':>6} {'wall s':>7} {'CPU s/att':>9} "
        f"{'calls/att':>9} {'prompt tok/att':>14}"
    )
    for row in rows:
        print(
            f"{row.harness:<12} {row.attempts:>8} {row.passed:>6} {row.wall_sec:>7.1f} "
            f"{row.cpu_per_attempt:>9.2f} {row.per_attempt(row.calls):>9.1f} "
            f"{row.per_attempt(row.prompt_tokens):>14.0f}"
        )
    baseline = rows[0]
    for row in rows[1:]:
        print(
            f"{row.harness} / {baseline.harness}: wall {row.wall_sec / baseline.wall_sec:.2f}x, "
            f"CPU per attempt {row.cpu_per_attempt / baseline.cpu_per_attempt:.2f}x, "
            f"prompt tokens per attempt {row.prompt_tokens / max(baseline.prompt_tokens, 1):.1f}x"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=16, help="attempts per harness")
    parser.add_argument("--concurrency", type=int, default=4, help="attempts at once")
    parser.add_argument("--keep", action="store_true", help="keep the state directory")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    root = Path(tempfile.mkdtemp(prefix="harness-cost-"))
    platform = None
    try:
        tasks = write_dataset(root / "tasks", args.tasks)
        platform = start_platform(root)
        engine, store = control_engine(Settings()), open_object_store(Settings().objects_url)
        published, _ = publish_dataset(
            engine, store, tasks, "bench/trivial", "v1", Settings().owner
        )
        dataset = DatasetPin(
            name=published.name,
            version=published.version,
            digest=published.digest,
            task_count=published.task_count,
        )
        rows = [_evaluate(platform, dataset, harness, args.concurrency) for harness in HARNESSES]
    finally:
        tear_down(platform, root, keep=args.keep)
    report(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
