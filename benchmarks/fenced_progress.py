"""What fencing a batch's progress costs: an `attempt.finished` append made the way a run
worker makes it now (`WorkerClaim.append`: under the run's worker lock, the worker
attempt's row locked and checked, deduplicated by its local sequence number) against the
unfenced append it replaced (`record_event`, the baseline), in one run on the same
control database, one writer and several writers at once.

    .venv/bin/python -m benchmarks.fenced_progress [--appends 2000] [--writers 4]
        [--database-url postgresql+psycopg://...]

Without `--database-url` a fresh SQLite database (the embedded default) is used.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import Engine

from synth_pipelines.contracts.plan import EvalPlan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest
from synth_pipelines.contracts.worker_attempt import WorkerAdvertisement
from synth_pipelines.control.database import engine_for
from synth_pipelines.control.events import record_event
from synth_pipelines.control.runs import accept_run
from synth_pipelines.control.worker_attempts import claim_batch
from synth_pipelines.control.worker_claim import WorkerClaim

PROJECT_ROOT = Path(__file__).resolve().parents[1]
WORKER = WorkerAdvertisement(
    worker="benchmark worker", engines=("oracle",), providers=("local",), judges=False
)


def _run(engine: Engine, name: str) -> RunRecord:
    oracle = json.loads((PROJECT_ROOT / "profiles" / "oracle.json").read_text())
    request = RunRequest(
        owner="benchmark",
        dataset=DatasetPin(
            name="synth/sample", version="v1", digest="sha256:" + "0" * 64, task_count=1
        ),
        actor=PinnedProfile.from_document(oracle),
        plan=EvalPlan(kind="eval", tasks_per_batch=1),
    )
    return accept_run(engine, request, name, org="local")[0]


def _timed(
    append: Callable[[int], object], appends: int, writers: int
) -> tuple[float, list[float]]:
    """Wall seconds for `appends` appends spread over `writers` threads, and each one's
    latency."""

    def one(number: int) -> float:
        began = time.perf_counter()
        append(number)
        return time.perf_counter() - began

    began = time.perf_counter()
    with ThreadPoolExecutor(writers) as pool:
        latencies = list(pool.map(one, range(appends)))
    return time.perf_counter() - began, latencies


def _row(label: str, wall: float, latencies: list[float]) -> dict[str, float | str]:
    ordered = sorted(latencies)
    return {
        "append": label,
        "per_sec": len(latencies) / wall,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99) - 1] * 1000,
    }


def measure(engine: Engine, appends: int, writers: int) -> list[dict[str, float | str]]:
    rows = []
    for concurrency in (1, writers):
        baseline_run = _run(engine, f"baseline-{concurrency}")
        claimed_run = _run(engine, f"fenced-{concurrency}")
        claim = WorkerClaim(
            engine, claim_batch(engine, claimed_run.spec, 0, WORKER, lease_sec=600), 600
        )

        def unfenced(number: int, run_id: str = baseline_run.run_id) -> int:
            return record_event(engine, run_id, "attempt.finished", {"attempt_id": f"a{number}"})

        def fenced(number: int, claim: WorkerClaim = claim) -> int:
            return claim.append("attempt.finished", {"attempt_id": f"a{number}"})

        # Interleaved halves, so that neither side has the warmer database throughout.
        for half in range(2):
            for label, append in (("record_event (baseline)", unfenced), ("fenced", fenced)):
                wall, latencies = _timed(append, appends // 2, concurrency)
                rows.append({"writers": concurrency, "half": half, **_row(label, wall, latencies)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = args.database_url or f"sqlite:///{scratch}/control.db"
        rows = measure(engine_for(url), args.appends, args.writers)
    print(f"database: {url.split(':')[0]}, {args.appends} appends per side and writer count")
    for writers in sorted({int(row["writers"]) for row in rows}):
        mine = [row for row in rows if row["writers"] == writers]
        by_label = {
            label: [row for row in mine if row["append"] == label]
            for label in ("record_event (baseline)", "fenced")
        }
        summary = {
            label: {
                key: statistics.mean(float(row[key]) for row in halves)
                for key in ("per_sec", "p50_ms", "p99_ms")
            }
            for label, halves in by_label.items()
        }
        for label, numbers in summary.items():
            print(
                f"{writers} writer(s)  {label:24s} {numbers['per_sec']:8.0f}/s  "
                f"p50 {numbers['p50_ms']:6.2f} ms  p99 {numbers['p99_ms']:6.2f} ms"
            )
        base, fenced = summary["record_event (baseline)"], summary["fenced"]
        ratios = {key: fenced[key] / base[key] for key in ("per_sec", "p50_ms", "p99_ms")}
        print(
            f"{writers} writer(s)  fenced/baseline: throughput {ratios['per_sec']:.2f}, "
            f"p50 {ratios['p50_ms']:.2f}, p99 {ratios['p99_ms']:.2f}"
        )


if __name__ == "__main__":
    main()
