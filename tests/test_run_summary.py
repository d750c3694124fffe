"""A run's results come from one tally per batch, kept as its tables are stored: they must
equal a full recount of the batches' current tables after every kind of re-write."""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import delete

from synth_pipelines.config import Settings
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest, batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.batch_results import read_batch_results, record_batch_results
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import accept_run
from synth_pipelines.control.schema import batch_results
from synth_pipelines.control.table_outputs import TableMissingError, load_table, store_table
from synth_pipelines.registry.datasets import get_dataset, publish_dataset
from synth_pipelines.runtime.results import RunResults, collect_results
from synth_pipelines.storage.objectstore import open_object_store
from tests.agent_runs import profile_document
from tests.conftest import SAMPLE_DATASET

TASKS = ("fix-off-by-one-pagination", "implement-slugify", "write-robots-txt")
ATTEMPTS = 4


def _run(tmp_path: Path) -> RunRecord:
    """An evaluation of three tasks, one task per batch: three batches."""
    for task in TASKS:
        shutil.copytree(SAMPLE_DATASET / task, tmp_path / "dataset" / task)
    engine = control_engine(Settings())
    publish_dataset(engine, _store(), tmp_path / "dataset", "test/three", "v1", "tester")
    dataset = get_dataset(engine, "test/three@v1")
    request = RunRequest(
        owner=Settings().owner,
        dataset=DatasetPin(
            name=dataset.name,
            version=dataset.version,
            digest=dataset.digest,
            task_count=dataset.task_count,
        ),
        actor=PinnedProfile.from_document(profile_document("oracle.json")),
        plan={"kind": "eval", "attempts_per_task": ATTEMPTS, "tasks_per_batch": 1},
    )
    run = accept_run(engine, request, org="local")[0]
    assert run.batch_count == len(TASKS)
    return run


def _store():
    return open_object_store(Settings().objects_url)


def _outcome(run: RunRecord, index: int, attempt: int, error: str | None) -> TrialOutcome:
    batch = batch_key(run.run_id, index)
    return TrialOutcome(
        run_id=run.run_id,
        batch=batch,
        attempt_id=f"{batch}.a{attempt}",
        group_index=0,
        attempt_index=attempt,
        task_position=index,
        task_name=TASKS[index],
        task_digest="sha256:task",
        trial_name=f"trial-{index}-{attempt}",
        trial_id=f"trial-{index}-{attempt}",
        actor_digest=run.spec.actor.digest,
        effective_model=None,
        status="error" if error else "completed",
        rewards_json=None,
        rationale=None,
        exception_type="RuntimeError" if error else None,
        exception_message=error,
        error_class="platform" if error else None,
        error_reason=error,
        trial_key=f"runs/{run.run_id}/trials/{batch}/{attempt}.tar.gz",
        trial_sha256="0" * 64,
        artifacts_digest=None,
        started_at=None,
        finished_at=None,
        duration_sec=1.0,
    )


def _assessment(outcome: TrialOutcome, reward: float | None) -> Assessment:
    return Assessment(
        assessment_id=f"{outcome.attempt_id}.verifier",
        run_id=outcome.run_id,
        batch=outcome.batch,
        attempt_id=outcome.attempt_id,
        task_name=outcome.task_name,
        assessor="verifier",
        assessor_digest="sha256:verifier",
        source_trial_id=outcome.trial_id,
        artifacts_digest=None,
        reward=reward,
        rewards_json=None,
        valid=outcome.error_class is None,
        error_class=outcome.error_class,
        reason=outcome.error_reason,
        rationale=None,
        assessed_at=datetime.now(UTC),
    )


def _record(
    run: RunRecord, index: int, rewards: list[float | None], errors: dict[int, str] | None = None
) -> None:
    """One batch's trials, then its assessments, stored as the batch's assets store them."""
    errors = errors or {}
    outcomes = [_outcome(run, index, a, errors.get(a)) for a in range(len(rewards))]
    key = batch_key(run.run_id, index)
    engine, store = control_engine(Settings()), _store()
    store_table(engine, store, "trials", key, TrialOutcome.to_table(outcomes))
    judged = [_assessment(o, r) for o, r in zip(outcomes, rewards, strict=True)]
    store_table(engine, store, "assessments", key, Assessment.to_table(judged))


def _recount(run: RunRecord) -> dict:
    """What the batches' current tables say, counted directly from every row."""
    engine, store = control_engine(Settings()), _store()
    outcomes: list[TrialOutcome] = []
    judged: list[Assessment] = []
    for index in range(run.batch_count):
        key = batch_key(run.run_id, index)
        try:
            outcomes += TrialOutcome.from_table(load_table(engine, store, "trials", key))
        except TableMissingError:
            break
        judged += Assessment.from_table(load_table(engine, store, "assessments", key))
    rewards = [a.reward for a in judged if a.valid and a.reward is not None]
    reward_of = {a.attempt_id: a.reward for a in judged}
    return {
        "attempts": len(judged),
        "assessed": len(rewards),
        "passed": sum(r >= 1.0 for r in rewards),
        "platform_errors": sum(not a.valid and a.error_class == "platform" for a in judged),
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "error_reasons": dict(
            Counter(f"{a.error_class}: {a.reason.splitlines()[0]}" for a in judged if not a.valid)
        ),
        "rewards_by_task": {
            name: [reward_of[o.attempt_id] for o in outcomes if o.task_name == name]
            for name in dict.fromkeys(o.task_name for o in outcomes)
        },
        "trial_keys": [o.trial_key for o in outcomes],
    }


def _counted(results: RunResults) -> dict:
    summary = results.summary
    return {
        "attempts": summary.attempts,
        "assessed": summary.assessed,
        "passed": summary.passed,
        "platform_errors": summary.platform_errors,
        "mean_reward": summary.mean_reward,
        "error_reasons": summary.error_reasons,
        "rewards_by_task": {task.task_name: task.rewards for task in results.tasks},
        "trial_keys": [key for task in results.tasks for key in task.trial_keys],
    }


def _collected(run: RunRecord) -> RunResults:
    return collect_results(control_engine(Settings()), _store(), run)


def test_results_equal_a_recount_as_batches_finish(state, tmp_path):
    run = _run(tmp_path)
    assert _collected(run).batches_done == 0

    _record(run, 0, [1.0, 0.0, 1.0, 0.5])
    _record(run, 1, [0.0, None, 1.0, 1.0], errors={1: "sandbox start failed\ndetails"})
    partial = _collected(run)
    assert partial.batches_done == 2
    assert _counted(partial) == _recount(run)

    _record(run, 2, [1.0, 1.0, 1.0, 1.0])
    results = _collected(run)
    assert results.batches_done == 3
    assert _counted(results) == _recount(run)
    assert (results.summary.attempts, results.summary.passed) == (12, 8)
    assert results.summary.error_reasons == {"platform: sandbox start failed": 1}
    assert sorted(read_batch_results(control_engine(Settings()), run.run_id)) == [0, 1, 2]


def test_a_retried_batch_replaces_its_tally_instead_of_adding_to_it(state, tmp_path):
    run = _run(tmp_path)
    for index in range(run.batch_count):
        _record(run, index, [0.0, None, 0.0, 0.0], errors={1: "model service down"})

    # The retry of batch 1 succeeds where its first try failed; it is stored twice more,
    # as a resumed run's batch would be.
    _record(run, 1, [1.0, 1.0, 1.0, 1.0])
    _record(run, 1, [1.0, 1.0, 1.0, 1.0])

    results = _collected(run)
    assert _counted(results) == _recount(run)
    assert results.summary.attempts == 12
    assert results.summary.passed == 4
    assert results.summary.platform_errors == 2


def test_a_regrade_changes_the_results_it_changes(state, tmp_path):
    run = _run(tmp_path)
    for index in range(run.batch_count):
        _record(run, index, [0.0, 0.0, 1.0, 0.0])
    assert _collected(run).summary.passed == 3

    # A regrade stores new assessments of batch 0's retained work; its trials stay.
    key = batch_key(run.run_id, 0)
    engine, store = control_engine(Settings()), _store()
    outcomes = TrialOutcome.from_table(load_table(engine, store, "trials", key))
    regraded = [_assessment(outcome, 1.0) for outcome in outcomes]
    store_table(engine, store, "assessments", key, Assessment.to_table(regraded))

    results = _collected(run)
    assert _counted(results) == _recount(run)
    assert results.summary.passed == 6
    assert results.tasks[0].rewards == [1.0, 1.0, 1.0, 1.0]


def test_batches_stored_before_tallies_were_kept_are_tallied_when_read(state, tmp_path):
    run = _run(tmp_path)
    for index in range(run.batch_count):
        _record(run, index, [1.0, 0.0, 0.0, 0.0])
    engine = control_engine(Settings())
    with engine.begin() as conn:
        conn.execute(delete(batch_results).where(batch_results.c.run_id == run.run_id))

    assert _counted(_collected(run)) == _recount(run)
    assert sorted(read_batch_results(engine, run.run_id)) == [0, 1, 2]


def test_a_readers_tally_never_replaces_a_newer_one(state, tmp_path):
    """A reader that found a batch untallied read its tables before the run worker stored
    the assessments; its late write must not undo the worker's tally of both."""
    run = _run(tmp_path)
    _record(run, 0, [1.0, 1.0, 0.0, 1.0])
    engine, store = control_engine(Settings()), _store()
    key = batch_key(run.run_id, 0)
    stale_trials = load_table(engine, store, "trials", key)

    record_batch_results(engine, key, stale_trials, None, replace=False)

    assert _counted(_collected(run)) == _recount(run)
    assert _collected(run).summary.passed == 3
