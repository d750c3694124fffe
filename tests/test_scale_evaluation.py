"""A many-batch evaluation of trivial tasks through the asset graph, the built-in agent
making one model call per attempt through the proxy: every attempt completes, the evidence
holds each call once, each batch runs only its page of the dataset, and memory stays flat."""

from __future__ import annotations

import json
import os

import dagster as dg
import pytest
from sqlalchemy import select

from benchmarks.process_memory import status_kib
from benchmarks.scale import SCRIPT, accept_evaluation
from benchmarks.trivial_tasks import write_dataset
from synth_pipelines.config import Settings
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import get_run
from synth_pipelines.control.schema import evidence_calls
from synth_pipelines.definitions import definitions
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.storage.objectstore import open_object_store
from tests.agent_runs import restored_trial, trial_outcomes
from tests.live_services import platform, set_script

TASKS = 8
ATTEMPTS_PER_TASK = 2
TASKS_PER_BATCH = 2
CONCURRENCY = 4
RSS_GROWTH_LIMIT = 1.25
"""Peak RSS of the process running the batches (and the proxy and model service) after the
last batch, over its peak after the first: per-attempt state that is never released grows
it with every batch."""


def _run_batches(run: RunRecord) -> tuple[RunRecord, list[int]]:
    """Every batch with the job the batch gate launches; this process's peak RSS (KiB)
    after each."""
    instance = dg.DagsterInstance.get()
    job = definitions(Settings()).resolve_job_def("evaluation_batch")
    peaks_kib = []
    for index in range(run.batch_count):
        key = batch_key(run.run_id, index)
        instance.add_dynamic_partitions("batches", [key])
        assert job.execute_in_process(partition_key=key, instance=instance).success
        peaks_kib.append(status_kib(os.getpid())[1])
    return get_run(control_engine(Settings()), run.run_id), peaks_kib


def _replies(trial_dir) -> int:
    log = trial_dir / "agent" / "builtin.jsonl"
    return sum(json.loads(line)["event"] == "reply" for line in log.read_text().splitlines())


@pytest.mark.slow
def test_many_batch_evaluation_completes_every_attempt_with_flat_memory(
    state, tmp_path, monkeypatch
):
    tasks = write_dataset(tmp_path / "tasks", TASKS)
    with platform(monkeypatch) as (model_url, proxy):
        set_script(model_url, SCRIPT)
        run = accept_evaluation(tasks, ATTEMPTS_PER_TASK, TASKS_PER_BATCH, CONCURRENCY)
        run, peaks_kib = _run_batches(run)
        proxy.flush()
    outcomes = trial_outcomes(run)

    assert run.status == "succeeded"
    assert len(outcomes) == TASKS * ATTEMPTS_PER_TASK
    assert {o.status for o in outcomes} == {"completed"}
    for outcome in outcomes:
        page = int(outcome.batch.rsplit(".b", 1)[1])
        assert page * TASKS_PER_BATCH <= outcome.task_position < (page + 1) * TASKS_PER_BATCH

    calls = sum(_replies(restored_trial(o, tmp_path / "restored")) for o in outcomes)
    attempts = [o.attempt_id for o in outcomes]
    engine = control_engine(Settings())
    with engine.connect() as conn:
        rows = conn.execute(
            select(evidence_calls.c.attempt_id).where(evidence_calls.c.run_id == run.run_id)
        ).all()
    evidence = read_attempt_evidence(engine, open_object_store(Settings().objects_url), attempts)
    assert evidence.problems == {}
    assert calls == len(rows) == len(attempts)
    assert sorted(row.attempt_id for row in rows) == sorted(attempts)
    assert sum(len(c) for c in evidence.calls.values()) == calls

    print(f"\npeak RSS after each batch, MiB: {[round(kib / 1024) for kib in peaks_kib]}")
    assert len(peaks_kib) == run.batch_count
    assert peaks_kib[-1] <= RSS_GROWTH_LIMIT * peaks_kib[0], peaks_kib
