"""What reading a run through the gateway costs: a real `synth gateway serve` process over
a SQLite control database, against the same read made directly in this process (the
baseline, same run).

- a run's summary: `GET /v1/runs/{run}` over a kept-alive HTTP connection, p50/p99,
  against `get_run` + `RunSummary.of` on the database directly, and their ratio;
- admission: `POST /v1/runs` (a new idempotency key each time) until the run is accepted,
  p50/p99, against `submit_run` on the database directly, and their ratio;
- events: a follower on `GET /v1/runs/{run}/events?follow=true` (server-sent events),
  the time from an event's commit to its arrival, p50 and worst;
- many clients: `--clients` threads polling the summary for `--seconds` while
  `--followers` follow the run's events and one event is committed every 0.1 s: the
  polls' p50/p99, errors, and the commit-to-arrival worst case across followers.

    .venv/bin/python -m benchmarks.gateway_reads [--reps 200] [--clients 50] \
        [--followers 10] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from sqlalchemy import Engine

from benchmarks.baseline_tree import PROJECT_ROOT
from benchmarks.proxy_processes import free_port
from synth_pipelines.config import Settings
from synth_pipelines.contracts.documents import RunSummary
from synth_pipelines.contracts.operator_key import KeyRequest
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest
from synth_pipelines.control.database import control_engine, create_tables
from synth_pipelines.control.events import read_events, record_event
from synth_pipelines.control.operator_keys import create_key
from synth_pipelines.control.runs import accept_run, get_run
from synth_pipelines.credentials import load_secret
from synth_pipelines.services.embedded import gateway_service
from synth_pipelines.services.supervisor import start, stop

SYNTH = str(Path(sys.executable).parent / "synth")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def follow(
    url: str, key: str, run_id: str, after: int, arrived: dict[int, float], stop: threading.Event
) -> None:
    """Follow the run's events after `after` until the stream ends or `stop` is set, noting
    each event's arrival (wall-clock seconds, comparable with its `created_at`) by its seq."""
    try:
        with httpx.stream(
            "GET",
            f"{url}/v1/runs/{run_id}/events",
            params={"follow": "true", "after": after},
            headers={"authorization": f"Bearer {key}"},
            timeout=None,
        ) as stream:
            stream.raise_for_status()
            for line in stream.iter_lines():
                if stop.is_set():
                    return
                if line.startswith("id: "):
                    arrived[int(line[4:])] = time.time()
    except httpx.HTTPError:
        if not stop.is_set():
            raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--followers", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gateway-reads-") as directory:
        os.environ["SYNTH_DATA_DIR"] = str(Path(directory) / "state")
        settings = Settings()
        engine = control_engine(settings)
        create_tables(engine)
        profile = json.loads((PROJECT_ROOT / "profiles" / "oracle.json").read_text())
        run = accept_run(
            engine,
            RunRequest(
                owner="alice",
                dataset=DatasetPin(name="b/one", version="v1", digest="0" * 64, task_count=1),
                actor=PinnedProfile.from_document(profile),
                plan={"kind": "eval"},
            ),
            org="local",
        )[0]
        key = create_key(
            engine,
            load_secret(settings.gateway_secret_path),
            KeyRequest(owner="alice", org="lab", role="viewer"),
        ).secret
        url = f"http://127.0.0.1:{free_port()}"
        os.environ["SYNTH_GATEWAY_URL"] = url
        service = gateway_service(Settings())
        start(settings.state_dir, service, cwd=PROJECT_ROOT)
        try:
            report(engine, url, key, run.run_id, args)
            operator = create_key(
                engine,
                load_secret(settings.gateway_secret_path),
                KeyRequest(owner="alice", org="lab", role="operator"),
            ).secret
            admission(engine, url, operator, min(args.reps, 100))
        finally:
            stop(settings.state_dir, service)


class _NoModel:
    """The oracle's runs sample no model: nothing is asked."""

    def require(self, model: str, *, train: bool) -> None:
        raise AssertionError(f"an oracle's run asked for model {model}")


def admission(engine: Engine, url: str, key: str, reps: int) -> None:
    """Accepting a run of a published dataset, through the gateway and directly."""
    from benchmarks.trivial_tasks import write_task
    from synth_pipelines.registry.datasets import publish_dataset
    from synth_pipelines.storage.objectstore import open_object_store
    from synth_pipelines.submission.run_requests import Submission, submit_run

    with tempfile.TemporaryDirectory(prefix="gateway-admission-") as directory:
        write_task(Path(directory), 0)
        store = open_object_store(Settings().objects_url)
        publish_dataset(engine, store, Path(directory), "bench/admit", "v1", "alice")
    profile = (PROJECT_ROOT / "profiles" / "oracle.json").read_text()
    body = {"dataset": "bench/admit@v1", "actor": json.loads(profile), "plan": {"kind": "eval"}}
    direct, through = [], []
    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}) as client:
        for index in range(reps):
            began = time.perf_counter()
            submit_run(
                engine,
                Submission(dataset=body["dataset"], actor=profile, plan='{"kind": "eval"}'),
                "alice",
                f"direct-{index}",
                org="lab",
                models=_NoModel(),
            )
            direct.append(time.perf_counter() - began)
            began = time.perf_counter()
            client.post(
                "/v1/runs", json={**body, "idempotency_key": f"gw-{index}"}
            ).raise_for_status()
            through.append(time.perf_counter() - began)
    d50, g50 = statistics.median(direct) * 1e3, statistics.median(through) * 1e3
    print(
        f"run start accepted, {reps} runs: direct p50 {d50:.1f} ms (baseline), gateway p50 "
        f"{g50:.1f} ms p99 {percentile(through, 0.99) * 1e3:.1f} ms, ratio {g50 / d50:.1f}"
    )


def report(engine: Engine, url: str, key: str, run_id: str, args: argparse.Namespace) -> None:
    headers = {"authorization": f"Bearer {key}"}
    direct, through = [], []
    with httpx.Client(base_url=url, headers=headers) as client:
        for _ in range(args.reps):
            began = time.perf_counter()
            RunSummary.of(get_run(engine, run_id), "http://dagster").model_dump()
            direct.append(time.perf_counter() - began)
            began = time.perf_counter()
            client.get(f"/v1/runs/{run_id}").raise_for_status()
            through.append(time.perf_counter() - began)
    d50, g50 = statistics.median(direct) * 1e3, statistics.median(through) * 1e3
    print(
        f"run summary, {args.reps} reads: direct p50 {d50:.2f} ms (baseline), gateway p50 "
        f"{g50:.2f} ms p99 {percentile(through, 0.99) * 1e3:.2f} ms, ratio {g50 / d50:.1f}"
    )

    # Followers start after the run's last event, and see only what comes next.
    (last,) = read_events(engine, run_id=run_id)[-1:]
    stop = threading.Event()
    arrivals: list[dict[int, float]] = [{} for _ in range(max(1, args.followers))]
    followers = [
        threading.Thread(
            target=follow, args=(url, key, run_id, last.seq, arrived, stop), daemon=True
        )
        for arrived in arrivals
    ]
    for thread in followers:
        thread.start()
    time.sleep(1.0)
    latencies: list[float] = []
    errors = [0]

    def poll() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            while not stop.is_set():
                began = time.perf_counter()
                try:
                    client.get(f"/v1/runs/{run_id}").raise_for_status()
                except httpx.HTTPError:
                    errors[0] += 1
                latencies.append(time.perf_counter() - began)

    pollers = [threading.Thread(target=poll, daemon=True) for _ in range(args.clients)]
    for thread in pollers:
        thread.start()
    committed: dict[int, float] = {}
    ends = time.monotonic() + args.seconds
    while time.monotonic() < ends:
        seq = record_event(engine, run_id, "probe", {"index": len(committed)})
        committed[seq] = time.time()
        time.sleep(0.1)
    time.sleep(1.5)
    stop.set()
    for thread in pollers:
        thread.join(timeout=30)
    delays = [arrived[i] - committed[i] for arrived in arrivals for i in committed if i in arrived]
    missing = sum(len(committed) - len(arrived) for arrived in arrivals)
    print(
        f"{args.clients} clients polling, {len(followers)} following, {len(committed)} events: "
        f"polls {len(latencies)} p50 {statistics.median(latencies) * 1e3:.1f} ms p99 "
        f"{percentile(latencies, 0.99) * 1e3:.1f} ms, {errors[0]} errors; event commit to "
        f"arrival p50 {statistics.median(delays) * 1e3:.0f} ms worst "
        f"{max(delays) * 1e3:.0f} ms, {missing} not arrived"
    )


if __name__ == "__main__":
    main()
