"""Many clients reading a running evaluation through the gateway, against the same
evaluation without them (the baseline, measured before and after in the same run).

The embedded platform is started once, as `synth up` starts it (model service scripted,
capture proxy, gateway, Dagster code server, daemon and webserver, on free ports), and a
dataset of trivial tasks is published once. Then the same evaluation of the built-in agent
(one scripted model call per attempt, through the proxy) runs `2 * --rounds + 1` times,
each a new run of the same size, alternating quiet and loaded and starting and ending
quiet, so that a host whose speed drifts is measured on both sides of every loaded run
(on a shared host two quiet runs minutes apart have differed by over 20%). During a loaded
run `--clients` threads each
read `GET /v1/runs/{run}/results` (what `synth run show RUN --json` prints) every
`--poll-sec`, and as many followers follow the run's events over server-sent events
(`GET /v1/runs/{run}/events?follow=true`), all with the local operator's key.

The clients stand for operators' own machines, so they run in a process of their own at
the idle scheduling class (`SCHED_IDLE`): they spend only CPU the platform leaves unused,
where on other machines they would spend none of this host's. The gateway runs as
`synth up` runs it, so everything it spends serving them is counted against the run. A
client starved of CPU would deliver less load rather than slow the run, so the report
counts the polls delivered against the polls due (target >= 95%), and the poll latencies
are measured by the clients, their own scheduling delays included.

A run's throughput is its attempts over the time from its `run.accepted` event to its
`run.succeeded` event, both as committed to the control database: everything after
acceptance (the batch gate noticing the run, launching each batch, the attempts, the
tallies) is something the load could slow, so nothing is left out.

It reports each run's throughput and the CPU time the host's hypervisor took from it
(steal); the loaded runs' mean throughput over the quiet runs' mean (target >= 0.95) and
each loaded run's ratio to the two quiet runs beside it; over the loaded runs, the polls'
count, p50 and p99 (target p99 < 1 s) and errors (target 0);
whether every follower saw `run.succeeded`, and the time from an event's `created_at`
(stamped in the transaction that commits it) to its arrival at a follower, p50 and worst,
for the events committed once every follower was connected; and the CPU seconds of the
gateway and of the clients' process in each run. A run that does not succeed with
every attempt finished and none failed ends the benchmark as FAILED.

    .venv/bin/python -m benchmarks.gateway_load [--attempts 600] [--rounds 2] \
        [--concurrency 4] [--clients 50] [--poll-sec 1.0] [--keep]
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

import httpx
from sqlalchemy import Engine

from benchmarks.gateway_reads import follow, percentile
from benchmarks.platform_services import Platform, start_platform, tear_down
from benchmarks.process_cpu import TICKS_PER_SEC, own_cpu_sec, tree_cpu_sec
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
    polling_sec: float = 0.0
    """From the pollers' start to their stop."""
    cpu_sec: float = 0.0
    """The clients' process's CPU seconds."""


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
    steal_sec: float
    """CPU time the hypervisor gave to other guests while this run ran."""
    readers: Readers | None
    """The clients' measurements, for a loaded run."""
    problem: str | None

    @property
    def per_hour(self) -> float:
        return 3600 * self.attempts / self.seconds

    @property
    def clients_cpu_sec(self) -> float:
        return 0.0 if self.readers is None else self.readers.cpu_sec


def steal_sec() -> float:
    """The host's CPU seconds stolen by the hypervisor since boot (`/proc/stat`)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / TICKS_PER_SEC


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
    started: float
    """`time.monotonic()` when the pollers started."""

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
        self.readers.polling_sec = time.monotonic() - self.started
        for thread in self.pollers:
            thread.join(timeout=30)


def start_load(url: str, key: str, run_id: str, clients: int, poll_sec: float) -> Load:
    """Pollers and followers of `run_id`, once every follower's stream is open."""
    readers, stop = Readers(), threading.Event()
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
    return Load(readers, followers, pollers, stop, time.monotonic())


def run_clients(
    url: str,
    key: str,
    args: tuple[int, float],
    ready: EventType,
    run_ids: Queue[str],
    connected: EventType,
    finished: EventType,
    results: Queue[Readers],
) -> None:
    """The clients' process (its imports done once this runs): idle class first, so every
    thread it starts inherits it."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    ready.set()
    run_id = run_ids.get()
    began = own_cpu_sec()
    load = start_load(url, key, run_id, *args)
    connected.set()
    finished.wait()
    load.end()
    load.readers.cpu_sec = own_cpu_sec() - began
    results.put(load.readers)


class Clients:
    """A loaded run's clients, in a process of their own at the idle scheduling class,
    started (its imports done) before the run is accepted, so that its start-up is not
    counted against the run."""

    def __init__(self, platform: Platform, clients: int, poll_sec: float) -> None:
        context = multiprocessing.get_context("spawn")
        ready, self.connected, self.finished = context.Event(), context.Event(), context.Event()
        self.run_ids: Queue[str] = context.Queue()
        self.results: Queue[Readers] = context.Queue()
        self.process = context.Process(
            target=run_clients,
            args=(
                platform.config.gateway_url,
                platform.operator_key(),
                (clients, poll_sec),
                ready,
                self.run_ids,
                self.connected,
                self.finished,
                self.results,
            ),
            daemon=True,
        )
        self.process.start()
        ready.wait(CONNECT_SEC)

    def follow(self, run_id: str) -> None:
        """Start reading `run_id`; returns once every follower's stream is open."""
        self.run_ids.put(run_id)
        self.connected.wait(CONNECT_SEC + 30)

    def end(self) -> Readers:
        """Stop the clients once the run has finished, and what they measured."""
        self.finished.set()
        readers = self.results.get(timeout=STREAM_END_SEC + 60)
        self.process.join(timeout=30)
        return readers


def evaluate(
    platform: Platform, dataset: DatasetVersion, args: argparse.Namespace, *, loaded: bool
) -> Measured:
    """One evaluation to its end, with the clients reading it if `loaded`."""
    gateway_pid = platform.pids[GATEWAY]
    gateway_cpu, steal = tree_cpu_sec([gateway_pid]), steal_sec()
    clients = Clients(platform, args.clients, args.poll_sec) if loaded else None
    run = accept_dataset_evaluation(dataset, ATTEMPTS_PER_TASK, TASKS_PER_BATCH, args.concurrency)
    readers = None
    try:
        if clients is not None:
            clients.follow(run.run_id)
        wait_until_finished(platform, run)
    finally:
        if clients is not None:
            readers = clients.end()
    gateway_cpu, steal = tree_cpu_sec([gateway_pid]) - gateway_cpu, steal_sec() - steal
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
    return Measured(run.run_id, attempts, seconds, gateway_cpu, steal, readers, problem)


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
        f"built-in agent; each loaded run: {args.clients} clients polling run results every "
        f"{args.poll_sec:g} s and {args.clients} following the run's events."
    )
    print(
        "Throughput: attempts over run.accepted to run.succeeded; baseline: the same "
        "evaluation without clients, before and after every loaded run."
    )
    print(
        f"{'run':<10}{'id':<16}{'seconds':>9}{'attempts/h':>12}{'steal s':>9}"
        f"{'gateway CPU s':>15}{'clients CPU s':>15}"
    )
    for run in runs:
        print(
            f"{'loaded' if run.readers else 'quiet':<10}{run.run_id:<16}{run.seconds:>9.1f}"
            f"{run.per_hour:>12.0f}{run.steal_sec:>9.1f}{run.gateway_cpu_sec:>15.1f}"
            f"{run.clients_cpu_sec:>15.1f}"
        )
    missed: list[str] = []
    if len(runs) < 3 or len(runs) % 2 == 0:
        return missed
    quiet = [run.per_hour for run in runs[::2]]
    loaded = [run.per_hour for run in runs[1::2]]
    ratio = statistics.mean(loaded) / statistics.mean(quiet)
    beside = [
        loaded[index] / statistics.mean(quiet[index : index + 2]) for index in range(len(loaded))
    ]
    drift = (max(quiet) - min(quiet)) / statistics.mean(quiet)
    print(
        f"mean(loaded) / mean(quiet) {ratio:.3f} over {len(loaded)} loaded and {len(quiet)} "
        f"quiet runs; target >= 0.95: {verdict(ratio >= 0.95)}"
    )
    print(
        "each loaded run over the quiet runs beside it: "
        f"{', '.join(f'{value:.3f}' for value in beside)}; the quiet runs span {drift:.1%}"
    )
    if ratio < 0.95:
        missed.append(f"loaded throughput {ratio:.3f} of quiet")
    loaded_runs = [run for run in runs if run.readers is not None]
    return missed + clients_report(loaded_runs, args, engine)


def clients_report(runs: list[Measured], args: argparse.Namespace, engine: Engine) -> list[str]:
    """What the clients of every loaded run measured, together; returns the targets missed."""
    readers = [run.readers for run in runs if run.readers is not None]
    missed: list[str] = []
    polls = [sec for one in readers for sec in one.poll_sec]
    errors = [error for one in readers for error in one.poll_errors]
    p99 = percentile(polls, 0.99) if polls else math.nan
    print(
        f"polls of /v1/runs/RUN/results: {len(polls)}, p50 "
        f"{(percentile(polls, 0.5) if polls else math.nan) * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms "
        f"(target < 1 s: {verdict(p99 < 1.0)}), errors {len(errors)} "
        f"(target 0: {verdict(not errors)})"
    )
    due = sum(args.clients * one.polling_sec / args.poll_sec for one in readers)
    delivered = len(polls) / due if due else math.nan
    print(
        f"polls delivered: {len(polls)} of {due:.0f} due ({delivered:.1%}; target >= 95%: "
        f"{verdict(delivered >= 0.95)})"
    )
    if not delivered >= 0.95:
        missed.append(f"clients delivered {delivered:.1%} of the polls due")
    if errors:
        print(f"  first poll error: {errors[0]}")
        missed.append(f"{len(errors)} poll errors")
    if not p99 < 1.0:
        missed.append(f"poll p99 {p99:.3f} s")
    seen = [followed(engine, run.run_id, run.readers) for run in runs if run.readers is not None]
    delays = [delay for one in seen for delay in one.delays_sec]
    follow_errors = [error for one in readers for error in one.follow_errors]
    saw = sum(one.saw_success for one in seen)
    print(
        f"followers: {saw}/{args.clients * len(readers)} saw run.succeeded; event commit to "
        f"arrival over {len(delays)} deliveries: p50 "
        f"{(statistics.median(delays) if delays else math.nan) * 1e3:.0f} ms, worst "
        f"{(max(delays) if delays else math.nan) * 1e3:.0f} ms; errors {len(follow_errors)}"
    )
    if follow_errors:
        print(f"  first follower error: {follow_errors[0]}")
    if saw != args.clients * len(readers) or follow_errors:
        missed.append("a follower missed events or failed")
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=600, help="attempts per run")
    parser.add_argument(
        "--rounds", type=int, default=2, help="loaded runs, each followed by a quiet one"
    )
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
        for index in range(2 * args.rounds + 1):
            run = evaluate(platform, dataset, args, loaded=index % 2 == 1)
            runs.append(run)
            print(
                f"{'loaded' if run.readers else 'quiet'} run {run.run_id}: {run.seconds:.1f} s, "
                f"{run.per_hour:.0f} attempts/h",
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
