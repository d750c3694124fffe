"""Many clients reading a running evaluation through the gateway, against the same
evaluation without them (the baseline, measured before and after in the same run).

The embedded platform is started once, as `synth up` starts it (model service scripted,
capture proxy, gateway, Dagster code server, daemon and webserver, on free ports), and a
dataset of trivial tasks is published once. Then the same evaluation of the built-in agent
(one scripted model call per attempt, through the proxy) runs three times, each a new run
of the same size, in the order quiet, loaded, quiet, so that a host whose speed drifts is
measured on both sides of the loaded run. During the loaded run `--clients` threads each
read `GET /v1/runs/{run}/results` (what `synth run show RUN --json` prints) every
`--poll-sec`, and as many followers follow the run's events over server-sent events
(`GET /v1/runs/{run}/events?follow=true`), all with the local operator's key.

A run's throughput is its attempts over the time from its `run.accepted` event to its
`run.succeeded` event, both as committed to the control database: everything after
acceptance (the batch gate noticing the run, launching each batch, the attempts, the
tallies) is something the load could slow, so nothing is left out.

It reports the quiet runs' throughputs, the loaded one and its ratio to the quiet mean
(target >= 0.95); the polls' count, p50 and p99 (target p99 < 1 s) and errors (target 0);
whether every follower saw `run.succeeded`, and the time from an event's `created_at`
(stamped in the transaction that commits it) to its arrival at a follower, p50 and worst,
for the events committed once every follower was connected; and the CPU seconds of the
gateway and of this process (the clients) in each run. A run that does not succeed with
every attempt finished and none failed ends the benchmark as FAILED.

    .venv/bin/python -m benchmarks.gateway_load [--attempts 600] [--concurrency 4] \
        [--clients 50] [--poll-sec 1.0] [--keep]
"""

from __future__ import annotations

import argparse
import math
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import Engine

from benchmarks.gateway_reads import follow, percentile
from benchmarks.platform_services import Platform, start_platform, tear_down
from benchmarks.process_cpu import own_cpu_sec, tree_cpu_sec
from benchmarks.scale import (
    ATTEMPTS_PER_TASK,
    CONCURRENCY,
    SAMPLE_SEC,
    SCRIPT,
    TASKS_PER_BATCH,
    accept_dataset_evaluation,
    failed_attempts,
    finished_attempts,
    publish_tasks,
    raise_if_stalled,
)
from benchmarks.trivial_tasks import write_dataset
from synth_pipelines.contracts.dataset import DatasetVersion
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.runs import get_run
from synth_pipelines.services.embedded import GATEWAY

CONNECT_SEC = 30.0
"""How long the followers may take to open their streams."""
STREAM_END_SEC = 60.0
"""How long a follower's stream may take to end once the run has finished."""


@dataclass
class Readers:
    """The clients of one loaded run: what the pollers measured and what the followers saw."""

    poll_sec: list[float] = field(default_factory=list)
    poll_errors: list[str] = field(default_factory=list)
    arrivals: list[dict[int, float]] = field(default_factory=list)
    follow_errors: list[str] = field(default_factory=list)
    connected_at: float = 0.0
    """Wall-clock time by which every follower had its stream open."""


def poll_results(
    url: str,
    key: str,
    run_id: str,
    period: float,
    delay: float,
    readers: Readers,
    stop: threading.Event,
) -> None:
    """Read the run's results every `period` seconds, the first after `delay`, until `stop`."""
    path = f"/v1/runs/{run_id}/results"
    headers = {"authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        due = time.monotonic() + delay
        while not stop.wait(max(0.0, due - time.monotonic())):
            began = time.perf_counter()
            try:
                response = client.get(path)
                if response.status_code != 200:
                    readers.poll_errors.append(f"{response.status_code}: {response.text[:200]}")
            except httpx.HTTPError as error:
                readers.poll_errors.append(repr(error))
            readers.poll_sec.append(time.perf_counter() - began)
            # A poll that took longer than the period is followed at once, not by a burst.
            due = max(due + period, time.monotonic())


def follow_events(url: str, key: str, run_id: str, readers: Readers, stop: threading.Event) -> None:
    arrived: dict[int, float] = {}
    readers.arrivals.append(arrived)
    try:
        follow(url, key, run_id, 0, arrived, stop)
    except Exception as error:  # every failure of a follower is reported
        readers.follow_errors.append(repr(error))


@dataclass(frozen=True)
class Measured:
    run_id: str
    attempts: int
    seconds: float
    """From `run.accepted` to `run.succeeded`, as committed."""
    gateway_cpu_sec: float
    clients_cpu_sec: float
    readers: Readers | None
    problem: str | None

    @property
    def per_hour(self) -> float:
        return 3600 * self.attempts / self.seconds


def wait_until_finished(platform: Platform, run: RunRecord) -> None:
    finished, last_change = 0, time.monotonic()
    while not get_run(control_engine(platform.config), run.run_id).finished:
        now, done = time.monotonic(), finished_attempts(run.run_id)
        if done != finished:
            finished, last_change = done, now
        raise_if_stalled(platform, finished, now - last_change)
        time.sleep(SAMPLE_SEC)


@dataclass
class Load:
    readers: Readers
    followers: list[threading.Thread]
    pollers: list[threading.Thread]
    stop: threading.Event

    def end(self) -> None:
        """Stop the pollers once the run has finished; the followers' streams end by
        themselves once the run's last event is sent, and one still open is an error."""
        deadline = time.monotonic() + STREAM_END_SEC
        for thread in self.followers:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        still_open = sum(thread.is_alive() for thread in self.followers)
        if still_open:
            self.readers.follow_errors.append(
                f"{still_open} streams still open {STREAM_END_SEC:.0f} s after the run finished"
            )
        self.stop.set()
        for thread in self.pollers:
            thread.join(timeout=30)


def start_load(platform: Platform, run_id: str, clients: int, poll_sec: float) -> Load:
    """Pollers and followers of `run_id`, once every follower's stream is open."""
    url, key, readers = platform.config.gateway_url, platform.operator_key(), Readers()
    stop = threading.Event()
    followers = [
        threading.Thread(target=follow_events, args=(url, key, run_id, readers, stop), daemon=True)
        for _ in range(clients)
    ]
    pollers = [
        threading.Thread(
            target=poll_results,
            # Spread over one period, as clients that started watching at different times.
            args=(url, key, run_id, poll_sec, poll_sec * index / clients, readers, stop),
            daemon=True,
        )
        for index in range(clients)
    ]
    for thread in [*followers, *pollers]:
        thread.start()
    # Each stream's first event is the run's acceptance: its arrival means the stream is open.
    deadline = time.monotonic() + CONNECT_SEC
    while len(readers.arrivals) < clients or not all(readers.arrivals):
        if readers.follow_errors or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    readers.connected_at = time.time()
    return Load(readers, followers, pollers, stop)


def evaluate(
    platform: Platform, dataset: DatasetVersion, args: argparse.Namespace, *, loaded: bool
) -> Measured:
    """One evaluation to its end, with the clients reading it if `loaded`."""
    gateway_pid = platform.pids[GATEWAY]
    gateway_cpu, clients_cpu = tree_cpu_sec([gateway_pid]), own_cpu_sec()
    run = accept_dataset_evaluation(dataset, ATTEMPTS_PER_TASK, TASKS_PER_BATCH, args.concurrency)
    load = start_load(platform, run.run_id, args.clients, args.poll_sec) if loaded else None
    try:
        wait_until_finished(platform, run)
    finally:
        if load is not None:
            load.end()
    gateway_cpu = tree_cpu_sec([gateway_pid]) - gateway_cpu
    clients_cpu = own_cpu_sec() - clients_cpu
    engine = control_engine(platform.config)
    status = get_run(engine, run.run_id).status
    attempts = args.attempts
    finished, failed = finished_attempts(run.run_id), failed_attempts(run.run_id, attempts)
    marks = {
        event.kind: event.created_at
        for event in read_events(
            engine, run_id=run.run_id, kinds=("run.accepted", "run.succeeded"), limit=10
        )
    }
    problem = None
    if status != "succeeded" or finished != attempts or failed:
        problem = (
            f"run {run.run_id} {status}: {finished}/{attempts} finished, {len(failed)} failed "
            f"(first: {failed[:1]})"
        )
    seconds = (
        (marks["run.succeeded"] - marks["run.accepted"]).total_seconds()
        if "run.succeeded" in marks
        else math.nan
    )
    readers = load.readers if load is not None else None
    return Measured(run.run_id, attempts, seconds, gateway_cpu, clients_cpu, readers, problem)


@dataclass(frozen=True)
class Followed:
    saw_success: int
    delays_sec: list[float]


def followed(engine: Engine, run_id: str, readers: Readers) -> Followed:
    """Which followers saw the run succeed, and each event's commit-to-arrival time for
    the events committed once every follower was connected."""
    events = read_events(engine, run_id=run_id, limit=10_000_000)
    committed = {event.seq: event.created_at.timestamp() for event in events}
    succeeded = [event.seq for event in events if event.kind == "run.succeeded"]
    saw = sum(all(seq in arrived for seq in succeeded) for arrived in readers.arrivals)
    after = {seq: at for seq, at in committed.items() if at >= readers.connected_at}
    delays = [
        arrived[seq] - at
        for arrived in readers.arrivals
        for seq, at in after.items()
        if seq in arrived
    ]
    missing = sum(seq not in arrived for arrived in readers.arrivals for seq in after)
    if missing:
        readers.follow_errors.append(f"{missing} event deliveries did not arrive")
    return Followed(saw if succeeded else 0, delays)


def verdict(met: bool) -> str:
    return "met" if met else "missed"


def print_report(runs: list[Measured], args: argparse.Namespace, engine: Engine) -> list[str]:
    """The report; returns the targets missed."""
    print()
    print(
        f"Gateway load: {args.attempts} attempts per run ({args.concurrency} at once) of the "
        f"built-in agent; loaded run: {args.clients} clients polling run results every "
        f"{args.poll_sec:g} s and {args.clients} following the run's events."
    )
    print(
        "Throughput: attempts over run.accepted to run.succeeded; baseline: the same "
        "evaluation without clients, before and after the loaded run."
    )
    print(
        f"{'run':<10}{'id':<16}{'seconds':>9}{'attempts/h':>12}{'gateway CPU s':>15}"
        f"{'clients CPU s':>15}"
    )
    names = ("quiet 1", "loaded", "quiet 2")
    for name, run in zip(names, runs, strict=False):
        print(
            f"{name:<10}{run.run_id:<16}{run.seconds:>9.1f}{run.per_hour:>12.0f}"
            f"{run.gateway_cpu_sec:>15.1f}{run.clients_cpu_sec:>15.1f}"
        )
    missed: list[str] = []
    if len(runs) < 3:
        return missed
    quiet = statistics.mean([runs[0].per_hour, runs[2].per_hour])
    ratio = runs[1].per_hour / quiet
    drift = abs(runs[0].per_hour - runs[2].per_hour) / quiet
    print(
        f"loaded / mean(quiet) {ratio:.3f} (quiet runs differ by {drift:.1%}); "
        f"target >= 0.95: {verdict(ratio >= 0.95)}"
    )
    if ratio < 0.95:
        missed.append(f"loaded throughput {ratio:.3f} of quiet")
    readers = runs[1].readers
    assert readers is not None
    polls = readers.poll_sec
    p99 = percentile(polls, 0.99) if polls else math.nan
    print(
        f"polls of /v1/runs/RUN/results: {len(polls)}, p50 "
        f"{(percentile(polls, 0.5) if polls else math.nan) * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms "
        f"(target < 1 s: {verdict(p99 < 1.0)}), errors {len(readers.poll_errors)} "
        f"(target 0: {verdict(not readers.poll_errors)})"
    )
    if readers.poll_errors:
        print(f"  first poll error: {readers.poll_errors[0]}")
    if not p99 < 1.0:
        missed.append(f"poll p99 {p99:.3f} s")
    if readers.poll_errors:
        missed.append(f"{len(readers.poll_errors)} poll errors")
    seen = followed(engine, runs[1].run_id, readers)
    delays = seen.delays_sec
    print(
        f"followers: {seen.saw_success}/{args.clients} saw run.succeeded; event commit to "
        f"arrival over {len(delays)} deliveries: p50 "
        f"{(statistics.median(delays) if delays else math.nan) * 1e3:.0f} ms, worst "
        f"{(max(delays) if delays else math.nan) * 1e3:.0f} ms; errors "
        f"{len(readers.follow_errors)}"
    )
    if readers.follow_errors:
        print(f"  first follower error: {readers.follow_errors[0]}")
    if seen.saw_success != args.clients or readers.follow_errors:
        missed.append("a follower missed events or failed")
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=600, help="attempts per run")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="attempts at once")
    parser.add_argument("--clients", type=int, default=50, help="pollers, and as many followers")
    parser.add_argument("--poll-sec", type=float, default=1.0, help="each poller's period")
    parser.add_argument("--keep", action="store_true", help="keep the state directory")
    args = parser.parse_args(argv)
    # Stopped from outside (a time box, `kill`), still stop the services it started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    args.attempts = math.ceil(args.attempts / ATTEMPTS_PER_TASK) * ATTEMPTS_PER_TASK
    root = Path(tempfile.mkdtemp(prefix="gateway-load-"))
    platform, runs = None, []
    try:
        print(f"state and logs in {root}", flush=True)
        tasks = write_dataset(root / "tasks", args.attempts // ATTEMPTS_PER_TASK)
        platform = start_platform(root)
        platform.set_script(SCRIPT)
        dataset = publish_tasks(tasks)
        for name, loaded in (("quiet", False), ("loaded", True), ("quiet", False)):
            run = evaluate(platform, dataset, args, loaded=loaded)
            runs.append(run)
            print(
                f"{name} run {run.run_id}: {run.seconds:.1f} s, {run.per_hour:.0f} attempts/h",
                flush=True,
            )
            if run.problem is not None:
                break
        engine = control_engine(platform.config)
        missed = print_report(runs, args, engine)
    finally:
        tear_down(platform, root, keep=args.keep)
    failures = [run.problem for run in runs if run.problem is not None]
    for problem in failures:
        print(f"FAILED: {problem}")
    if missed:
        print(f"targets missed: {'; '.join(missed)}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
