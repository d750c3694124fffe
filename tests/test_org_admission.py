"""Organizations' admission limits: an admin sets them through the gateway; a run over its
organization's run limit waits in line and starts when one of its runs ends; an attempt
over its organization's attempt limit waits for one of them to finish, in any worker
pool; two organizations never share a limit; `synth pool show` lists each one's line to
an admin, and to any other key its own organization's only.

Everything is real: the control database (SQLite, and PostgreSQL where processes race),
the gateway under uvicorn, the batch gate evaluated against a Dagster instance, separate
processes admitting attempts in separate pools.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import dagster as dg
import httpx
import pytest
from typer.testing import CliRunner

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.contracts.admission_lease import ResourceDemand
from synth_pipelines.contracts.org_limits import LimitsRequest
from synth_pipelines.contracts.plan import ResourceBudget
from synth_pipelines.control.admission_leases import pool_leases, request_lease
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.org_limits import set_limits
from synth_pipelines.control.runs import get_run, transition
from synth_pipelines.runtime.admission import PoolAdmission, WorkerPool
from tests.conftest import PROJECT_ROOT
from tests.test_pool_admission import logged_intervals, most_at_once

DEMAND = ResourceDemand(cpus=0.5, memory_mb=64, storage_mb=64)


def pool_named(name: str) -> WorkerPool:
    """A pool roomy enough that only an organization's limit holds anything back."""
    return WorkerPool(
        name,
        ResourceBudget(max_active_attempts=8, cpus=8, memory_mb=8192, storage_mb=8192),
        timedelta(seconds=60),
    )


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def gw(state: Path, monkeypatch: pytest.MonkeyPatch):
    # Imported here, not by the helper processes that import this module.
    from tests.gateway_support import gateway

    with gateway() as running:
        monkeypatch.setenv("SYNTH_GATEWAY_URL", running.url)
        yield running


def test_an_admin_sets_and_reads_an_orgs_limits_and_no_one_else_may(gw, monkeypatch):
    from tests.gateway_support import bearer

    admin = bearer(gw.key("root", role="admin", org="ops"))
    limits = f"{gw.url}/v1/orgs/lab/limits"
    unset = httpx.get(limits, headers=admin)
    assert unset.status_code == 200
    assert unset.json() == {"org": "lab", "max_concurrent_runs": None, "max_active_attempts": None}

    put = httpx.put(limits, headers=admin, json={"max_concurrent_runs": 2})
    assert put.json() == {"org": "lab", "max_concurrent_runs": 2, "max_active_attempts": None}
    assert httpx.get(limits, headers=admin).json()["max_concurrent_runs"] == 2
    assert (
        httpx.get(f"{gw.url}/v1/orgs/mill/limits", headers=admin).json()["max_concurrent_runs"]
        is None
    )

    for role in ("operator", "viewer"):
        key = bearer(gw.key("alice", role=role))
        for refused in (
            httpx.put(limits, headers=key, json={"max_concurrent_runs": 9}),
            httpx.get(limits, headers=key),
        ):
            assert refused.status_code == 403
            assert "role admin" in refused.json()["error"]["message"]
    bad = httpx.put(limits, headers=admin, json={"max_concurrent_runs": -1})
    assert bad.status_code == 422 and "max_concurrent_runs" in bad.json()["error"]["message"]

    # The CLI: the option given is set, the other kept; none is unlimited again.
    monkeypatch.setenv("SYNTH_API_KEY", gw.key("root", role="admin", org="ops"))
    set_ = cli("admin", "org", "limits", "lab", "--max-attempts", "3", "--json")
    assert set_.exit_code == 0, set_.output
    assert json.loads(set_.stdout) == {
        "org": "lab",
        "max_concurrent_runs": 2,
        "max_active_attempts": 3,
    }
    cleared = cli("admin", "org", "limits", "lab", "--max-runs", "none")
    assert cleared.exit_code == 0, cleared.output
    assert "runs at once unlimited, attempts at once 3" in cleared.stdout
    wrong = cli("admin", "org", "limits", "lab", "--max-runs", "many")
    assert wrong.exit_code == 2 and "--max-runs 'many'" in wrong.output
    monkeypatch.setenv("SYNTH_API_KEY", gw.key("alice", role="operator"))
    denied = cli("admin", "org", "limits", "lab")
    assert denied.exit_code == 2 and "role admin" in denied.output


def _tick(cursor: str | None) -> tuple[dg.SensorResult, str]:
    """One evaluation of the batch gate, as the daemon runs it, from `cursor`."""
    from assets.sensors import batch_gate
    from synth_pipelines.definitions import definitions

    defs = definitions(Settings())
    with dg.build_sensor_context(
        instance=dg.DagsterInstance.get(),
        definitions=defs,
        resources=defs.resources,
        cursor=cursor,
    ) as context:
        result = batch_gate(context)
    assert isinstance(result, dg.SensorResult)
    return result, result.cursor or ""


def _launched(result: dg.SensorResult) -> set[str]:
    return {request.partition_key for request in result.run_requests if request.partition_key}


def test_a_run_over_its_orgs_limit_queues_and_starts_when_another_ends(gw, monkeypatch):
    engine = control_engine(Settings())
    set_limits(engine, "lab", LimitsRequest(max_concurrent_runs=1), "root")
    set_limits(engine, "mill", LimitsRequest(max_concurrent_runs=1), "root")
    first, second = gw.run("alice", org="lab"), gw.run("bob", org="lab")
    other = gw.run("carol", org="mill")

    result, cursor = _tick(None)
    # The first of lab's runs and mill's run start: two organizations, two limits.
    assert _launched(result) == {
        first.run_id,
        f"{first.run_id}.b0000",
        other.run_id,
        f"{other.run_id}.b0000",
    }
    waiting = get_run(engine, second.run_id)
    assert waiting.status == "accepted" and waiting.admitted_at is None
    (queued,) = read_events(engine, run_id=second.run_id, kinds=("run.queued",))
    assert queued.data["org"] == "lab" and queued.data["limit"] == 1
    assert "waits in line" in queued.data["reason"]

    monkeypatch.setenv("SYNTH_API_KEY", gw.key("root", role="admin", org="ops"))
    shown = cli("pool", "show", "--json")
    assert shown.exit_code == 0, shown.output
    orgs = {org["limits"]["org"]: org for org in json.loads(shown.stdout)["orgs"]}
    assert orgs["lab"]["running_runs"] == [first.run_id]
    assert orgs["lab"]["queued_runs"] == [second.run_id]
    assert orgs["lab"]["limits"]["max_concurrent_runs"] == 1
    assert orgs["mill"]["running_runs"] == [other.run_id] and orgs["mill"]["queued_runs"] == []
    table = cli("pool", "show")
    assert table.exit_code == 0 and second.run_id in table.stdout and "1 of 1" in table.stdout

    # Nothing ended: the run stays in line, and is told so once.
    result, cursor = _tick(cursor)
    assert _launched(result) == set()
    assert len(read_events(engine, run_id=second.run_id, kinds=("run.queued",))) == 1

    transition(engine, first.run_id, "succeeded", "run.succeeded", {"batches": 1})
    result, cursor = _tick(cursor)
    assert _launched(result) == {second.run_id, f"{second.run_id}.b0000"}
    assert get_run(engine, second.run_id).admitted_at is not None
    assert read_events(engine, run_id=second.run_id, kinds=("run.admitted",))
    result, _ = _tick(cursor)
    assert _launched(result) == set()


def test_a_key_below_admin_sees_only_its_own_orgs_line_in_the_pool(gw):
    from tests.gateway_support import bearer

    engine = control_engine(Settings())
    pool = WorkerPool.configured(Settings())
    lab, mill = gw.run("alice", org="lab").run_id, gw.run("carol", org="mill").run_id
    for run_id in (lab, mill):
        request_lease(
            engine, pool.name, "worker", DEMAND, pool.lease_ttl, run_id=run_id, attempt_id=run_id
        )

    def shown(key: str) -> tuple[dict[str, list[str]], set[str], object]:
        answer = httpx.get(f"{gw.url}/v1/pool", headers=bearer(key))
        assert answer.status_code == 200, answer.text
        document = answer.json()
        queued = {org["limits"]["org"]: org["queued_runs"] for org in document["orgs"]}
        leased = {lease["run_id"] for lease in document["held"] + document["waiting"]}
        return queued, leased, (document["limits"], document["use"])

    admin_queued, admin_leases, pool_as_a_whole = shown(gw.key("root", role="admin", org="ops"))
    assert (admin_queued, admin_leases) == ({"lab": [lab], "mill": [mill]}, {lab, mill})
    for role in ("viewer", "operator"):
        assert shown(gw.key("dave", role=role, org="mill")) == (
            {"mill": [mill]},
            {mill},
            pool_as_a_whole,
        )


def test_attempts_over_their_orgs_limit_wait_for_one_to_finish(gw):
    engine = control_engine(Settings())
    set_limits(engine, "lab", LimitsRequest(max_active_attempts=1), "root")
    set_limits(engine, "mill", LimitsRequest(max_active_attempts=1), "root")
    lab_runs = [gw.run("alice", org="lab").run_id, gw.run("bob", org="lab").run_id]
    mill_run = gw.run("carol", org="mill").run_id
    # Two pools: the organization's limit holds across both.
    first_pool, second_pool = (
        PoolAdmission(engine, pool_named("pool-a")),
        PoolAdmission(engine, pool_named("pool-b")),
    )

    def states(pool: str) -> dict[str | None, str]:
        return {lease.attempt_id: lease.state for lease in pool_leases(engine, pool)}

    async def scenario() -> list[str]:
        order: list[str] = []
        release = asyncio.Event()

        async def attempt(admission: PoolAdmission, run_id: str, name: str, hold: bool) -> None:
            async with admission.admit(DEMAND, name, run_id=run_id, attempt_id=name):
                order.append(name)
                if hold:
                    await release.wait()

        holding = asyncio.create_task(attempt(first_pool, lab_runs[0], "lab-1", hold=True))
        while "lab-1" not in order:
            await asyncio.sleep(0.05)
        waiting = asyncio.create_task(attempt(second_pool, lab_runs[1], "lab-2", hold=False))
        await asyncio.wait_for(attempt(second_pool, mill_run, "mill-1", hold=False), 20)
        await asyncio.sleep(0.5)
        assert states("pool-b") == {"lab-2": "waiting"}
        assert states("pool-a") == {"lab-1": "held"}
        release.set()
        await asyncio.wait_for(asyncio.gather(holding, waiting), 20)
        return order

    assert asyncio.run(scenario()) == ["lab-1", "mill-1", "lab-2"]
    assert pool_leases(engine, "pool-a") == pool_leases(engine, "pool-b") == []


def hold_org_attempts(log: str, pool: str, run_id: str, attempts: int, hold_sec: float) -> None:
    """Run in a separate process: `attempts` attempts of `run_id` at once in `pool`, each
    logging when it holds its admission and when it gives it up."""
    import time

    async def attempt(admission: PoolAdmission, index: int, out) -> None:
        async with admission.admit(DEMAND, f"attempt {index}", run_id=run_id):
            out.write(f"start {time.time()}\n")
            out.flush()
            await asyncio.sleep(hold_sec)
            out.write(f"end {time.time()}\n")
            out.flush()

    async def together() -> None:
        admission = PoolAdmission(control_engine(Settings()), pool_named(pool))
        with open(log, "w") as out:
            await asyncio.gather(*(attempt(admission, index, out) for index in range(attempts)))

    asyncio.run(together())


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_database(request, state: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_server").create_database("orgs")
        monkeypatch.setenv("SYNTH_DATABASE_URL", url)
    control_engine(Settings())
    return request.param


def test_processes_in_two_pools_never_hold_more_than_the_orgs_limit(
    shared_database, gw, tmp_path: Path
):
    """An organization's attempts in two pools, admitted by two processes each under its
    own pool's lock, still count against one limit."""
    engine = control_engine(Settings())
    set_limits(engine, "lab", LimitsRequest(max_active_attempts=2), "root")
    run_ids = [gw.run("alice", org="lab").run_id, gw.run("bob", org="lab").run_id]
    logs = [tmp_path / f"attempts-{n}.log" for n in range(2)]
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from tests.test_org_admission import hold_org_attempts; "
                f"hold_org_attempts({str(log)!r}, 'pool-{n}', {run_id!r}, 4, 0.3)",
            ],
            cwd=PROJECT_ROOT,
        )
        for n, (log, run_id) in enumerate(zip(logs, run_ids, strict=True))
    ]
    assert [process.wait(timeout=90) for process in processes] == [0, 0]
    intervals = [interval for log in logs for interval in logged_intervals(log)]
    assert len(intervals) == 8
    assert most_at_once(intervals) == 2
    assert engine.dialect.name == shared_database
