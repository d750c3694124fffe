"""A large evaluation on trivial tasks through the real platform, against bare Harbor.

One run writes N trivial tasks (`benchmarks/trivial_tasks.py`), measures the bare Harbor
trial floor on them (Harbor's `Trial` API, oracle agent, the same bubblewrap environment,
the same concurrency, no platform), then starts the embedded platform on free ports (model
service scripted, capture proxy, Dagster daemon and webserver, as `synth up` does),
publishes the tasks as a dataset and accepts an `eval` run of the built-in agent profile,
whose one model call per attempt goes through the proxy. The daemon's batch gate launches
every batch; each batch reads its page of the dataset. It reports attempts/hour and
attempts/CPU-hour against the floor, and CPU milliseconds per attempt by platform service
(each with the processes it started and reaped: the code server's include its run workers,
their sandboxes and agents). While it runs it samples:

- peak RSS (`/proc/<pid>/status` VmHWM) of every platform process by role, in the windows
  up to 10%, 30% and 100% of the attempts (1k, 3k and 10k by default);
- how long `synth run show RUN --json` and a Dagster GraphQL query of the run's batches
  take, p50/p99;

and at the end compares evidence rows with calls (one per attempt), every chunk's bytes
verified against its committed SHA-256.

    .venv/bin/python -m benchmarks.scale [--attempts 10000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from benchmarks.platform_services import (
    Platform,
    alive,
    platform_environment,
    start_platform,
    tear_down,
)
from benchmarks.process_cpu import tree_cpu_sec
from benchmarks.process_memory import MemoryWatch
from benchmarks.proxy import percentile
from benchmarks.scale_floor import Throughput, bare_trials
from benchmarks.trivial_tasks import write_dataset
from synth_pipelines.config import Settings
from synth_pipelines.contracts.dataset import DatasetVersion
from synth_pipelines.contracts.plan import EvalPlan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest
from synth_pipelines.contracts.scoped_token import AttemptScope
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.runs import accept_run, get_run
from synth_pipelines.control.schema import evidence_calls, evidence_chunks, run_events
from synth_pipelines.credentials import load_signing_key, mint_token
from synth_pipelines.registry.datasets import publish_dataset
from synth_pipelines.sandbox.options import HostSettings
from synth_pipelines.storage.objectstore import open_object_store

SCRIPT = [{"completion": "Done.", "repeat": True, "logprob": -0.5}]
"""Every call is answered with a final reply, so the built-in agent makes exactly one call."""
RUN_BATCHES = """
query($filter: RunsFilter) {
  runsOrError(filter: $filter, limit: 20) {
    __typename
    ... on Runs { results { runId status } }
  }
}
"""
SAMPLE_SEC = 2.0
PROBE_SEC = 15.0
STALL_SEC = 600.0
"""No attempt finishing for this long ends the benchmark as failed."""
ATTEMPTS_PER_TASK = 4
TASKS_PER_BATCH = 50
CONCURRENCY = 4
"""Attempts at once."""


def profile(name: str) -> PinnedProfile:
    document = json.loads((Settings().project_root / "profiles" / name).read_text())
    return PinnedProfile.from_document(document)


def publish_tasks(tasks: Path) -> DatasetVersion:
    """The trivial tasks in `tasks` as a published dataset (the one already published,
    if it holds the same tasks)."""
    engine, store = control_engine(Settings()), open_object_store(Settings().objects_url)
    return publish_dataset(engine, store, tasks, "scale/trivial", "v1", Settings().owner)[0]


def accept_dataset_evaluation(
    dataset: DatasetVersion, attempts_per_task: int, tasks_per_batch: int, concurrency: int
) -> RunRecord:
    """A new `eval` run of the built-in agent on a published dataset."""
    request = RunRequest(
        owner=Settings().owner,
        dataset=DatasetPin(
            name=dataset.name,
            version=dataset.version,
            digest=dataset.digest,
            task_count=dataset.task_count,
        ),
        actor=profile("builtin.json"),
        plan=EvalPlan(
            kind="eval",
            attempts_per_task=attempts_per_task,
            tasks_per_batch=tasks_per_batch,
            budget={
                "max_active_attempts": concurrency,
                "cpus": concurrency,
                "memory_mb": 256 * concurrency,
                "storage_mb": 64 * concurrency,
            },
        ),
    )
    return accept_run(control_engine(Settings()), request, org="local")[0]


def accept_evaluation(
    tasks: Path, attempts_per_task: int, tasks_per_batch: int, concurrency: int
) -> RunRecord:
    """Publish the tasks in `tasks` and accept an evaluation of them."""
    return accept_dataset_evaluation(
        publish_tasks(tasks), attempts_per_task, tasks_per_batch, concurrency
    )


def finished_attempts(run_id: str) -> int:
    with control_engine(Settings()).connect() as conn:
        return conn.execute(
            select(func.count())
            .select_from(run_events)
            .where(run_events.c.run_id == run_id, run_events.c.kind == "attempt.finished")
        ).scalar_one()


def failed_attempts(run_id: str, attempts: int) -> list[dict[str, Any]]:
    events = read_events(
        control_engine(Settings()), run_id=run_id, kinds=("attempt.finished",), limit=attempts + 1
    )
    return [event.data for event in events if event.data["status"] != "completed"]


def time_run_show(run_id: str) -> tuple[float, str | None]:
    """Milliseconds, and what went wrong if it did not answer with the run's JSON."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "synth_pipelines.cli", "run", "show", run_id, "--json"],
        capture_output=True,
        timeout=120,
    )
    elapsed = (time.perf_counter() - started) * 1e3
    try:
        shown = json.loads(done.stdout)["run_id"] == run_id
    except (ValueError, KeyError, TypeError):
        shown = False
    if done.returncode != 0 or not shown:
        return elapsed, f"exit {done.returncode}, stdout shown: {shown}, {done.stderr[-300:]!r}"
    return elapsed, None


def time_graphql(dagster_url: str, run_id: str) -> float:
    started = time.perf_counter()
    response = httpx.post(
        f"{dagster_url}/graphql",
        json={
            "query": RUN_BATCHES,
            "variables": {"filter": {"tags": [{"key": "synth/run", "value": run_id}]}},
        },
        timeout=120,
    )
    elapsed = (time.perf_counter() - started) * 1e3
    response.raise_for_status()
    if response.json()["data"]["runsOrError"]["__typename"] != "Runs":
        raise RuntimeError(f"the webserver did not list the runs: {response.text[:1000]}")
    return elapsed


def _mib(kib: int) -> str:
    return f"{kib / 1024:.0f}"


@dataclass
class Milestone:
    attempts: int
    elapsed_sec: float
    peaks_kib: dict[str, int]


@dataclass
class Progress:
    milestones: list[Milestone] = field(default_factory=list)
    run_show_ms: list[float] = field(default_factory=list)
    run_show_failures: list[str] = field(default_factory=list)
    graphql_ms: list[float] = field(default_factory=list)
    elapsed_sec: float = 0.0
    cpu_sec: float = 0.0
    cpu_sec_by_service: dict[str, float] = field(default_factory=dict)
    finished: int = 0


def _probes(progress: Progress) -> str:
    if not progress.run_show_ms:
        return "no responsiveness probes yet"
    return (
        f"synth run show p50/p99 {percentile(progress.run_show_ms, 0.5):.0f}/"
        f"{percentile(progress.run_show_ms, 0.99):.0f} ms ({len(progress.run_show_failures)} "
        f"failed), GraphQL p50/p99 {percentile(progress.graphql_ms, 0.5):.0f}/"
        f"{percentile(progress.graphql_ms, 0.99):.0f} ms, {len(progress.run_show_ms)} probes"
    )


def raise_if_stalled(platform: Platform, finished: int, quiet_sec: float) -> None:
    """Fail a run whose services stopped or whose last attempt finished `quiet_sec` ago,
    more than STALL_SEC."""
    stopped = set(platform.pids) - set(alive(platform))
    if stopped or quiet_sec > STALL_SEC:
        raise RuntimeError(
            f"the run stalled at {finished} attempts (services stopped: {sorted(stopped)}); "
            f"see the logs in {platform.config.state_dir / 'logs'}"
        )


def watch(platform: Platform, run: RunRecord, marks: list[int]) -> Progress:
    """Sample until the run finishes; a milestone closes each memory window."""
    memory = MemoryWatch(list(platform.pids.values()))
    progress = Progress()
    cpu = tree_cpu_sec(list(platform.pids.values()))
    service_cpu = {name: tree_cpu_sec([pid]) for name, pid in platform.pids.items()}
    started = last_probe = last_change = time.monotonic()
    pending = list(marks)
    while True:
        memory.sample()
        now = time.monotonic()
        finished = finished_attempts(run.run_id)
        if finished != progress.finished:
            progress.finished, last_change = finished, now
        while pending and finished >= pending[0]:
            mark = Milestone(pending.pop(0), now - started, memory.window())
            progress.milestones.append(mark)
            peaks = ", ".join(f"{role} {_mib(kib)}" for role, kib in sorted(mark.peaks_kib.items()))
            print(f"  {finished} attempts after {mark.elapsed_sec:.0f} s; peak RSS MiB: {peaks}")
            print(f"  {_probes(progress)}", flush=True)
        if get_run(control_engine(Settings()), run.run_id).finished:
            break
        if now - last_probe >= PROBE_SEC:
            shown_ms, failure = time_run_show(run.run_id)
            progress.run_show_ms.append(shown_ms)
            if failure is not None:
                progress.run_show_failures.append(failure)
            progress.graphql_ms.append(time_graphql(platform.config.dagster_url, run.run_id))
            last_probe = now
        raise_if_stalled(platform, finished, now - last_change)
        time.sleep(SAMPLE_SEC)
    progress.elapsed_sec = time.monotonic() - started
    progress.cpu_sec = tree_cpu_sec(list(platform.pids.values())) - cpu
    progress.cpu_sec_by_service = {
        name: tree_cpu_sec([pid]) - service_cpu[name] for name, pid in platform.pids.items()
    }
    return progress


@dataclass(frozen=True)
class Evidence:
    rows: int
    attempts_with_rows: int
    verified_rows: int


def flush_evidence(platform: Platform) -> None:
    token = mint_token(
        load_signing_key(platform.config.signing_key_path),
        AttemptScope(
            run_id="r-scale",
            attempt_id="a-operator",
            owner=platform.config.owner,
            model="synth/qwen3-tiny",
            role="operator",
        ),
        ttl_sec=600,
    )
    httpx.post(
        f"{platform.config.proxy_url}/internal/evidence/flush",
        json={},
        headers={"x-api-key": token},
        timeout=600,
    ).raise_for_status()


def published_evidence(platform: Platform, run_id: str) -> Evidence:
    flush_evidence(platform)
    store = open_object_store(platform.config.objects_url)
    with control_engine(Settings()).connect() as conn:
        rows = conn.execute(
            select(evidence_calls.c.attempt_id).where(evidence_calls.c.run_id == run_id)
        ).all()
        chunks = conn.execute(
            select(
                evidence_chunks.c.chunk_key, evidence_chunks.c.sha256, evidence_chunks.c.calls
            ).where(evidence_chunks.c.run_id == run_id)
        ).all()
    verified = 0
    for key, sha256, calls in chunks:
        store.get(key, expected_sha256=sha256)
        verified += calls
    return Evidence(len(rows), len({row.attempt_id for row in rows}), verified)


def print_report(attempts: int, floor: Throughput, progress: Progress, evidence: Evidence) -> None:
    ours = Throughput(progress.finished, progress.elapsed_sec, progress.cpu_sec)
    print()
    print(
        f"Scale: {ours.attempts} attempts of the built-in agent (one scripted model call "
        f"each through the proxy) in {ours.wall_sec:.0f} s, {ours.cpu_sec:.0f} CPU s; "
        f"baseline: bare Harbor trials ({floor.attempts} oracle trials, same tasks, environment "
        f"and concurrency) in {floor.wall_sec:.0f} s, {floor.cpu_sec:.0f} CPU s."
    )
    print(f"{'measure':<44}{'platform':>12}{'bare Harbor':>14}{'ratio':>8}")
    for name, platform_value, floor_value in (
        ("attempts/hour", ours.per_hour, floor.per_hour),
        ("attempts/CPU-hour (steadier on a shared host)", ours.per_cpu_hour, floor.per_cpu_hour),
    ):
        print(
            f"{name:<44}{platform_value:>12.0f}{floor_value:>14.0f}"
            f"{platform_value / floor_value:>8.2f}"
        )
    print()
    print("CPU ms per attempt by service (each with the processes it started and reaped):")
    for name, cpu_sec in sorted(progress.cpu_sec_by_service.items(), key=lambda item: -item[1]):
        print(f"  {name:<42}{1000 * cpu_sec / max(1, ours.attempts):>8.0f}")
    print(f"  {'bare Harbor (its whole process)':<42}{1000 * floor.cpu_sec / floor.attempts:>8.0f}")
    print()
    roles = sorted({role for mark in progress.milestones for role in mark.peaks_kib})
    header = "".join(f"{mark.attempts:>10}" for mark in progress.milestones)
    first, last = progress.milestones[0], progress.milestones[-1]
    print(f"Peak RSS MiB by role, per window ending at attempts:{'':<4}{header}{'last/first':>12}")
    for role in roles:
        cells = "".join(f"{_mib(mark.peaks_kib.get(role, 0)):>10}" for mark in progress.milestones)
        ratio = last.peaks_kib.get(role, 0) / max(1, first.peaks_kib.get(role, 0))
        print(f"  {role:<54}{cells}{ratio:>12.2f}")
    print()
    for name, samples in (
        ("synth run show RUN --json", progress.run_show_ms),
        ("Dagster GraphQL (runs of the synth run)", progress.graphql_ms),
    ):
        if samples:
            print(
                f"{name:<44} p50 {percentile(samples, 0.5):7.0f} ms  p99 "
                f"{percentile(samples, 0.99):7.0f} ms  ({len(samples)} samples during the run)"
            )
    if progress.run_show_failures:
        print(
            f"synth run show failed {len(progress.run_show_failures)} of "
            f"{len(progress.run_show_ms)} times; first: {progress.run_show_failures[0]}"
        )
    print()
    print(
        f"Evidence: {evidence.rows} rows for {attempts} calls, {evidence.attempts_with_rows} "
        f"attempts with rows, {evidence.verified_rows} rows in chunks whose SHA-256 verified"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="300 attempts")
    parser.add_argument("--attempts-per-task", type=int, default=ATTEMPTS_PER_TASK)
    parser.add_argument("--tasks-per-batch", type=int, default=TASKS_PER_BATCH)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="attempts at once")
    parser.add_argument("--floor-trials", type=int, default=200, help="bare Harbor trials")
    parser.add_argument("--keep", action="store_true", help="keep the state directory")
    args = parser.parse_args(argv)
    # Stopped from outside (a time box, `kill`), still stop the services it started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    wanted = 300 if args.quick else args.attempts
    task_count = math.ceil(wanted / args.attempts_per_task)
    attempts = task_count * args.attempts_per_task
    marks = sorted({max(1, attempts // 10), max(1, attempts * 3 // 10), attempts})
    root = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    platform = None
    try:
        print(f"state and logs in {root}", flush=True)
        tasks = write_dataset(root / "tasks", task_count)
        os.environ.update(platform_environment(root))
        floor_dirs = sorted(tasks.iterdir())[: args.floor_trials]
        host = HostSettings.model_validate(Settings(), from_attributes=True)
        floor = bare_trials(floor_dirs, root / "bare-trials", args.concurrency, host)
        print(f"bare Harbor floor: {floor.per_hour:.0f} trials/hour", flush=True)
        platform = start_platform(root)
        platform.set_script(SCRIPT)
        run = accept_evaluation(
            tasks, args.attempts_per_task, args.tasks_per_batch, args.concurrency
        )
        print(f"run {run.run_id}: {attempts} attempts in {run.batch_count} batches", flush=True)
        progress = watch(platform, run, marks)
        status = get_run(control_engine(Settings()), run.run_id).status
        failed = failed_attempts(run.run_id, attempts)
        evidence = published_evidence(platform, run.run_id)
    finally:
        tear_down(platform, root, keep=args.keep)
    print_report(attempts, floor, progress, evidence)
    problems = []
    if status != "succeeded" or progress.finished != attempts or failed:
        problems.append(
            f"run {status}: {progress.finished}/{attempts} finished, {len(failed)} failed "
            f"(first: {failed[:1]})"
        )
    if not evidence.rows == evidence.verified_rows == evidence.attempts_with_rows == attempts:
        problems.append(f"evidence {evidence} does not match {attempts} calls")
    for problem in problems:
        print(f"FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
