"""How fast the CLI answers: `synth --help` and `synth run list` (CPU seconds of the child)
and `synth run show RUN --json` (wall p50/p99) on a run of 10,000 attempts, for this tree
and for a baseline commit checked out beside it, on the same control database.

This tree's commands speak to a gateway (`synth gateway serve` from this tree, on
loopback, started here) with the local operator's key; the default baseline is the last
commit whose commands read the control database themselves (its `run show RUN --json`
answered at start-up from SQLite), so the ratio is the gateway's cost end to end.

The run is recorded through the platform's own functions: a published dataset of trivial
tasks, a run accepted as `synth run start` accepts it, and each batch's trials and
assessments stored as the batch's assets store them. Both trees are byte-compiled first
and run with this interpreter, each with PYTHONPATH pointing at its own tree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine

from benchmarks.baseline_tree import PROJECT_ROOT, baseline_tree, remove_tree
from benchmarks.proxy_processes import free_port
from benchmarks.trivial_tasks import task_name, write_task
from synth_pipelines.config import Settings
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest, batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import RunRecord, accept_run
from synth_pipelines.control.table_outputs import store_table, tally_batch
from synth_pipelines.credentials import load_secret
from synth_pipelines.registry.datasets import get_dataset, publish_dataset
from synth_pipelines.services.embedded import gateway_service
from synth_pipelines.services.operator_key import ensure_operator_key
from synth_pipelines.services.supervisor import start, stop
from synth_pipelines.storage.objectstore import ObjectStore, open_object_store

BASELINE = "414fb41df624b05a255bddb79c106bda3ad937c5"
"""The last commit whose CLI read the control database itself, not through the gateway."""


def _isolated_state(state_dir: Path) -> None:
    """The CLI children inherit this: a SQLite control database and a local object store."""
    os.environ["SYNTH_DATA_DIR"] = str(state_dir)
    os.environ.pop("SYNTH_DATABASE_URL", None)
    os.environ.pop("SYNTH_OBJECT_STORE_URL", None)


def _record_run(work: Path, batches: int, attempts: int) -> str:
    """An evaluation with every batch stored: `batches` tasks, one per batch, `attempts`
    attempts each."""
    for index in range(batches):
        write_task(work / "dataset", index)
    engine, store = control_engine(Settings()), open_object_store(Settings().objects_url)
    publish_dataset(engine, store, work / "dataset", "bench/lines", "v1", Settings().owner)
    dataset = get_dataset(engine, "bench/lines@v1")
    profile = json.loads((PROJECT_ROOT / "profiles" / "oracle.json").read_text())
    request = RunRequest(
        owner=Settings().owner,
        dataset=DatasetPin(
            name=dataset.name,
            version=dataset.version,
            digest=dataset.digest,
            task_count=dataset.task_count,
        ),
        actor=PinnedProfile.from_document(profile),
        plan={"kind": "eval", "attempts_per_task": attempts, "tasks_per_batch": 1},
    )
    run = accept_run(engine, request, org="local")[0]
    for index in range(batches):
        key = batch_key(run.run_id, index)
        outcomes = [_outcome(run, key, index, attempt) for attempt in range(attempts)]
        _store_batch(engine, store, key, outcomes)
    return run.run_id


def _outcome(run: RunRecord, key: str, index: int, attempt: int) -> TrialOutcome:
    # One attempt in ten fails on the platform, so that error reasons are counted too.
    error = f"sandbox start failed on worker {attempt % 3}" if attempt % 10 == 9 else None
    now = datetime.now(UTC)
    return TrialOutcome(
        run_id=run.run_id,
        batch=key,
        attempt_id=f"{key}.t{index:05d}.a{attempt:03d}",
        group_index=0,
        attempt_index=attempt,
        task_position=index,
        task_name=task_name(index),
        task_digest="sha256:" + "0" * 64,
        trial_name=f"{task_name(index)}__{attempt:03d}",
        trial_id=f"{key}-{attempt:03d}",
        actor_digest=run.spec.actor.digest,
        effective_model=None,
        status="error" if error else "completed",
        rewards_json=None if error else json.dumps({"reward": float(attempt % 2)}),
        rationale=None,
        exception_type="SandboxError" if error else None,
        exception_message=error,
        error_class="platform" if error else None,
        error_reason=error,
        trial_key=f"runs/{run.run_id}/trials/{key}/{attempt:03d}.tar.gz",
        trial_sha256="0" * 64,
        artifacts_digest=None,
        started_at=now,
        finished_at=now,
        duration_sec=1.0,
    )


def _store_batch(
    engine: Engine, store: ObjectStore, key: str, outcomes: list[TrialOutcome]
) -> None:
    """The trials, then the verifier's assessments, as the batch's assets store them."""
    store_table(engine, store, "trials", key, TrialOutcome.to_table(outcomes))
    judged = [
        Assessment(
            assessment_id=f"{o.attempt_id}.verifier",
            run_id=o.run_id,
            batch=o.batch,
            attempt_id=o.attempt_id,
            task_name=o.task_name,
            assessor="verifier",
            assessor_digest="sha256:" + "1" * 64,
            source_trial_id=o.trial_id,
            artifacts_digest=None,
            reward=None if o.error_class else json.loads(o.rewards_json)["reward"],
            rewards_json=o.rewards_json,
            valid=o.error_class is None,
            error_class=o.error_class,
            reason=o.error_reason,
            rationale=None,
            assessed_at=o.finished_at,
        )
        for o in outcomes
    ]
    store_table(engine, store, "assessments", key, Assessment.to_table(judged))


def _compile(tree: Path) -> None:
    for package in ("synth_pipelines", "assets", "resources"):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / package)], check=True)


@dataclass(frozen=True)
class Timing:
    wall_sec: float
    cpu_sec: float
    stdout: bytes


def _synth(tree: Path, args: list[str]) -> Timing:
    """One `synth` command from `tree`, with its own CPU time from wait4's rusage."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "synth_pipelines.cli", *args],
            cwd=tree,
            env=env,
            stdout=out,
            stderr=subprocess.DEVNULL,
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise RuntimeError(f"synth {' '.join(args)} in {tree} exited {child.returncode}")
        out.seek(0)
        return Timing(wall, usage.ru_utime + usage.ru_stime, out.read())


def _which_tree(tree: Path) -> Path:
    """Where the child's package comes from, so a baseline cannot silently run this tree."""
    found = subprocess.run(
        [sys.executable, "-c", "import synth_pipelines; print(synth_pipelines.__file__)"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(found.stdout.strip()).resolve().parent.parent


@contextmanager
def _gateway() -> Iterator[None]:
    """This tree's gateway on a free loopback port, started as `synth up` starts it, and
    the local operator's key where the CLI finds it; every child started meanwhile speaks
    to it."""
    os.environ["SYNTH_GATEWAY_URL"] = f"http://127.0.0.1:{free_port()}"
    settings = Settings()
    engine = control_engine(settings)
    ensure_operator_key(
        engine,
        load_secret(settings.gateway_secret_path),
        settings.operator_key_path,
        settings.owner,
    )
    service = gateway_service(settings)
    start(settings.state_dir, service, cwd=PROJECT_ROOT)
    try:
        yield
    finally:
        stop(settings.state_dir, service)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _finish_a_batch_again(run_id: str) -> None:
    """What a batch finishing does to `run show`'s inputs: its tally stored anew."""
    tally_batch(
        control_engine(Settings()), open_object_store(Settings().objects_url), batch_key(run_id, 0)
    )


def _measure(trees: dict[str, Path], run_id: str, reps: int) -> dict[str, dict]:
    """Every repetition of one tree, then the next tree's: the trees keep `run show`'s
    document in the same table with fingerprints of their own code, so reads interleaved
    across trees would each find the other's and build it again. `show` reads a run whose
    inputs did not change since the last read (a finished run, or one between batches);
    `show_changed` reads it right after a batch's tally was stored again, so nothing kept
    is current."""
    commands = {
        "help": ["--help"],
        "list": ["run", "list"],
        # In this order: the read after a change keeps a document the next read finds.
        "show_changed": ["run", "show", run_id, "--json"],
        "show": ["run", "show", run_id, "--json"],
    }
    timings: dict[str, dict[str, list[Timing]]] = {
        name: {c: [] for c in commands} for name in trees
    }
    for name, tree in trees.items():
        for _ in range(reps):
            for command, args in commands.items():
                if command == "show_changed":
                    _finish_a_batch_again(run_id)
                timings[name][command].append(_synth(tree, args))
    measured = {}
    for name, by_command in timings.items():
        walls = [show.wall_sec for show in by_command["show"]]
        changed = [show.wall_sec for show in by_command["show_changed"]]
        measured[name] = {
            "help_cpu": statistics.median(t.cpu_sec for t in by_command["help"]),
            "list_cpu": statistics.median(t.cpu_sec for t in by_command["list"]),
            "show_p50": _percentile(walls, 0.5),
            "show_p99": _percentile(walls, 0.99),
            "show_cpu": statistics.median(t.cpu_sec for t in by_command["show"]),
            "changed_p50": _percentile(changed, 0.5),
            "document": json.loads(by_command["show"][-1].stdout),
        }
    return measured


def _same_results(current: dict, baseline: dict) -> bool:
    fields = ("summary", "batches_done", "tasks")
    return all(current[name] == baseline[name] for name in fields)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help="Commit to compare against.")
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--attempts", type=int, default=100, help="Attempts per batch.")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cli-speed-") as temp:
        work = Path(temp)
        _isolated_state(work / "state")
        started = time.perf_counter()
        run_id = _record_run(work, args.batches, args.attempts)
        print(
            f"recorded {run_id}: {args.batches} batches x {args.attempts} attempts "
            f"in {time.perf_counter() - started:.1f}s"
        )
        baseline = baseline_tree(args.baseline, work)
        try:
            for tree in (PROJECT_ROOT, baseline):
                if _which_tree(tree) != tree.resolve():
                    raise RuntimeError(f"{tree} does not import its own synth_pipelines")
                _compile(tree)
            with _gateway():
                measured = _measure(
                    {"current": PROJECT_ROOT, "baseline": baseline}, run_id, args.reps
                )
        finally:
            remove_tree(baseline)

    current, base = measured["current"], measured["baseline"]
    print(f"baseline: {args.baseline}; {args.reps} repetitions each")
    rows = (
        ("synth --help CPU s (median)", "help_cpu", 0.7),
        ("synth run list CPU s (median)", "list_cpu", 0.7),
        ("synth run show --json wall s p50", "show_p50", 0.1),
        ("synth run show --json wall s p99", "show_p99", None),
        ("synth run show --json CPU s (median)", "show_cpu", None),
        ("  ... right after a batch finished, p50", "changed_p50", None),
    )
    for label, key, target in rows:
        verdict = (
            ""
            if target is None
            else f"  target < {target}: " + ("met" if current[key] < target else "missed")
        )
        print(
            f"{label:40s} current {current[key]:.3f}  baseline {base[key]:.3f}  "
            f"ratio {current[key] / base[key]:.2f}{verdict}"
        )
    same = _same_results(current["document"], base["document"])
    print(f"run show --json: same summary, batches and tasks in both trees: {same}")


if __name__ == "__main__":
    main()
