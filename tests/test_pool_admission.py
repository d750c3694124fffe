"""One worker pool's budget, shared by attempts of separate processes and runs.

Every test starts real processes against the real control database: they can only share
the budget through its lease rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.admission_lease import ResourceDemand
from synth_pipelines.contracts.plan import ResourceBudget
from synth_pipelines.control.database import control_engine
from synth_pipelines.runtime.admission import PoolAdmission, WorkerPool
from tests.conftest import PROJECT_ROOT

POOL = "test-pool"
DEMAND = ResourceDemand(cpus=0.5, memory_mb=64, storage_mb=64)


def pool_of(max_active: int, ttl_sec: float = 60) -> WorkerPool:
    return WorkerPool(
        POOL,
        ResourceBudget(max_active_attempts=max_active, cpus=8, memory_mb=8192, storage_mb=8192),
        timedelta(seconds=ttl_sec),
    )


def hold_attempts(log: str, attempts: int, max_active: int, hold_sec: float) -> None:
    """Run in a separate process: `attempts` attempts at once, each logging when it holds
    its admission and when it gives it up."""

    async def attempt(admission: PoolAdmission, index: int, out) -> None:
        async with admission.admit(DEMAND, f"attempt {index}", attempt_id=f"{os.getpid()}-{index}"):
            out.write(f"start {time.time()}\n")
            out.flush()
            await asyncio.sleep(hold_sec)
            out.write(f"end {time.time()}\n")
            out.flush()

    async def attempts_together() -> None:
        admission = PoolAdmission(control_engine(Settings()), pool_of(max_active))
        with open(log, "w") as out:
            await asyncio.gather(*(attempt(admission, index, out) for index in range(attempts)))

    asyncio.run(attempts_together())


def hold_forever(ttl_sec: float) -> None:
    """Run in a separate process: hold one admission until killed."""

    async def holding() -> None:
        admission = PoolAdmission(control_engine(Settings()), pool_of(1, ttl_sec))
        async with admission.admit(DEMAND, "the doomed attempt", attempt_id="doomed"):
            print("held", flush=True)
            await asyncio.Event().wait()

    asyncio.run(holding())


def python_process(call: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", f"from tests.test_pool_admission import *; {call}"],
        cwd=PROJECT_ROOT,
        **popen,
    )


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    # At equal times an end counts before a start: the release came before the admission.
    moments = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    alive = peak = 0
    for _, change in moments:
        alive += change
        peak = max(peak, alive)
    return peak


def logged_intervals(log: Path) -> list[tuple[float, float]]:
    lines = [line.split() for line in log.read_text().splitlines()]
    starts = [float(t) for kind, t in lines if kind == "start"]
    ends = [float(t) for kind, t in lines if kind == "end"]
    assert len(starts) == len(ends)
    # Each attempt holds for the same time, so the nth start pairs with the nth end.
    return list(zip(sorted(starts), sorted(ends), strict=True))


@pytest.fixture(params=["sqlite", "postgresql"])
def control_database(request, state: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The control database every process of the test shares."""
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_server").create_database("pool")
        monkeypatch.setenv("SYNTH_DATABASE_URL", url)
    # The schema exists before the processes start, so what they race for is the pool.
    control_engine(Settings())
    return request.param


def test_three_processes_never_hold_more_than_the_pool(control_database, tmp_path: Path):
    logs = [tmp_path / f"attempts-{n}.log" for n in range(3)]
    processes = [
        python_process(f"hold_attempts({str(log)!r}, attempts=4, max_active=2, hold_sec=0.3)")
        for log in logs
    ]
    assert [process.wait(timeout=60) for process in processes] == [0, 0, 0]
    intervals = [interval for log in logs for interval in logged_intervals(log)]
    assert len(intervals) == 12
    assert most_at_once(intervals) == 2
    assert control_engine(Settings()).dialect.name == control_database


def _pool_show() -> dict:
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "synth"), "pool", "show", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(shown.stdout)


def test_a_killed_holders_lease_is_reclaimed_once_it_expires(
    state: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("SYNTH_ADMISSION_POOL", POOL)
    monkeypatch.setenv("SYNTH_POOL_MAX_ACTIVE_ATTEMPTS", "1")
    # Imported here, not by the helper processes that import this module.
    from tests.gateway_support import gateway

    with gateway() as gw:
        # `synth pool show` asks the gateway, whose deployment's pool this is; the lease,
        # of no run, is no organization's, so only an admin's key is shown it.
        monkeypatch.setenv("SYNTH_GATEWAY_URL", gw.url)
        monkeypatch.setenv("SYNTH_API_KEY", gw.key("root", role="admin", org="ops"))
        _killed_holders_lease_is_reclaimed()


def _killed_holders_lease_is_reclaimed() -> None:
    holder = python_process("hold_forever(ttl_sec=2)", stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        shown = _pool_show()
        assert [lease["holder"].rsplit(":", 1)[1] for lease in shown["held"]] == [str(holder.pid)]
        assert shown["held"][0]["attempt_id"] == "doomed"
        assert shown["use"]["active_attempts"] == 1 and shown["limits"]["max_active_attempts"] == 1
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    killed_at = datetime.now(UTC)

    async def admitted_at() -> datetime:
        async with PoolAdmission(control_engine(Settings()), pool_of(1, ttl_sec=2)).admit(
            DEMAND, "next"
        ):
            return datetime.now(UTC)

    admitted = asyncio.run(admitted_at())
    # Its last renewal set the expiry at most a ttl (2 s) ahead: the slot comes back within
    # seconds, not never (the bound leaves room for a loaded host); nothing was admitted
    # before it expired.
    assert admitted - killed_at < timedelta(seconds=15)
    assert admitted >= datetime.fromisoformat(shown["held"][0]["expires_at"])
    assert _pool_show()["held"] == []


def run_worker(run_id: str, ready: str, go: str) -> None:
    """Run in a separate process: a run worker executing the run's batches in-process,
    once every worker has loaded and the test says go."""
    from synth_pipelines.control.runs import get_run
    from tests.agent_runs import run_batches

    run = get_run(control_engine(Settings()), run_id)
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.05)
    run_batches(run)


def _accept_evaluation() -> str:
    from tests.agent_runs import accept_plan, profile_document

    plan = {
        "kind": "eval",
        "attempts_per_task": 3,
        "budget": {"max_active_attempts": 2, "cpus": 4, "memory_mb": 4096, "storage_mb": 4096},
    }
    return accept_plan(profile_document("oracle.json"), plan).run_id


def _worker_environment(root: Path) -> dict[str, str]:
    """The shared control database and pool; a Dagster instance of its own."""
    home = root / "dagster_home"
    home.mkdir(parents=True)
    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return {**os.environ, "DAGSTER_HOME": str(home)}


def test_two_run_workers_take_turns_within_one_pool(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from synth_pipelines.control.admission_leases import pool_leases
    from synth_pipelines.control.runs import get_run
    from tests.agent_runs import one_task_dataset, publish, trial_outcomes

    for name, value in {
        "SYNTH_ADMISSION_POOL": POOL,
        "SYNTH_POOL_MAX_ACTIVE_ATTEMPTS": "2",
        "SYNTH_POOL_CPUS": "8",
        "SYNTH_POOL_MEMORY_MB": "8192",
        "SYNTH_POOL_STORAGE_MB": "8192",
    }.items():
        monkeypatch.setenv(name, value)
    publish(one_task_dataset(tmp_path, "write-robots-txt"))
    run_ids = [_accept_evaluation(), _accept_evaluation()]
    go = tmp_path / "go"
    workers = [
        python_process(
            f"run_worker({run_id!r}, {str(tmp_path / run_id)!r}, {str(go)!r})",
            env=_worker_environment(tmp_path / f"worker-{run_id}"),
        )
        for run_id in run_ids
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / run_id).exists() for run_id in run_ids):
        assert all(worker.poll() is None for worker in workers)
        assert time.monotonic() < deadline
        time.sleep(0.1)
    go.touch()
    assert [worker.wait(timeout=240) for worker in workers] == [0, 0]

    engine = control_engine(Settings())
    intervals = {
        run_id: [
            (outcome.started_at.timestamp(), outcome.finished_at.timestamp())
            for outcome in trial_outcomes(get_run(engine, run_id))
        ]
        for run_id in run_ids
    }
    first, second = intervals.values()
    assert len(first) == len(second) == 3
    assert most_at_once(first + second) == 2
    # Turns: each run started an attempt while the other still had one to finish.
    assert min(start for start, _ in first) < max(end for _, end in second)
    assert min(start for start, _ in second) < max(end for _, end in first)
    assert pool_leases(engine, POOL) == []


@pytest.mark.slow
def test_a_regrade_waits_for_the_pool_like_an_attempt(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A judge's sandbox is an attempt's worth of the machine: a regrade takes a lease in
    the worker pool and waits while the pool is full, then runs once it frees up."""
    import threading

    from synth_pipelines.control.admission_leases import pool_leases
    from tests.agent_runs import evaluate, one_task_dataset, profile_document, trial_outcomes
    from tests.live_services import platform
    from tests.test_judges import _regrade

    monkeypatch.setenv("SYNTH_ADMISSION_POOL", POOL)
    monkeypatch.setenv("SYNTH_POOL_MAX_ACTIVE_ATTEMPTS", "1")
    with platform(monkeypatch):
        run = evaluate(
            one_task_dataset(tmp_path, "update-version-file"), profile_document("oracle.json")
        )
        (outcome,) = trial_outcomes(run)
        holder = python_process("hold_forever(ttl_sec=2)", stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline() == "held\n"
            results = []
            regrading = threading.Thread(
                target=lambda: results.append(_regrade(run, None, "rg-pool").success)
            )
            regrading.start()
            engine, deadline = control_engine(Settings()), time.monotonic() + 120
            while not any(
                lease.attempt_id == outcome.attempt_id for lease in pool_leases(engine, POOL)
            ):
                assert regrading.is_alive() and time.monotonic() < deadline
                time.sleep(0.1)
            (waiting,) = [
                lease
                for lease in pool_leases(engine, POOL)
                if lease.attempt_id == outcome.attempt_id
            ]
            assert waiting.state == "waiting" and waiting.run_id == run.run_id
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait()
        regrading.join(timeout=240)
    assert results == [True]
    assert pool_leases(control_engine(Settings()), POOL) == []
