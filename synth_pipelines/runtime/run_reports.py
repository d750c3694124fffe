"""What the gateway answers about one run: its results (`synth run show`), its per-batch
series (`synth run metrics`) and what stopped it, built from the control database and the
object store. The CLI renders these documents; it never reads the records itself."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine

from synth_pipelines.contracts.assessment import passed
from synth_pipelines.contracts.documents import (
    AssessmentComparison,
    RunMetricsDocument,
    RunResultsDocument,
    RunSummary,
    StopDocument,
)
from synth_pipelines.contracts.policy_update import BatchLearningRow
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import parse_batch_key
from synth_pipelines.control.events import read_events
from synth_pipelines.control.policy_updates import run_updates
from synth_pipelines.control.run_document_fingerprint import STOP_EVENTS
from synth_pipelines.runtime.results import collect_results
from synth_pipelines.storage.objectstore import ObjectStore


def learning_rows(engine: Engine, run_id: str) -> list[BatchLearningRow]:
    """One row per batch whose update is recorded, in batch order."""
    return [BatchLearningRow.of(update) for update in run_updates(engine, run_id)]


def learning_warnings(rows: list[BatchLearningRow]) -> list[str]:
    return [
        f"batch {row.batch_index} applied no optimizer step: {row.no_step_reason}"
        for row in rows
        if row.status == "acknowledged" and not row.optimizer_step
    ]


def event_reward(rewards_json: str | None) -> float | None:
    """The headline reward of an `attempt.finished` event (as `judging/assessing.py` reads it)."""
    rewards = json.loads(rewards_json) if rewards_json else {}
    if "reward" in rewards:
        return float(rewards["reward"])
    return float(next(iter(rewards.values()))) if len(rewards) == 1 else None


def _sampled_tokens(row: BatchLearningRow) -> int:
    return round(row.action_tokens_per_turn * row.turns_per_attempt * row.attempts)


def batch_series(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    """One `run metrics` row per batch that finished an attempt or recorded an update, in
    batch order. A recorded update is the batch's account of itself (its attempts and
    reward mean); otherwise the batch's finished attempts are counted, and the learning
    fields are None."""
    finished = read_events(engine, run_id=run_id, kinds=("attempt.finished",), limit=10_000_000)
    rewards: dict[str, list[float | None]] = {}
    for event in finished:
        rewards.setdefault(event.data["batch"], []).append(event_reward(event.data.get("rewards")))
    learned = {row.batch: row for row in learning_rows(engine, run_id)}
    series = []
    for batch in sorted(rewards.keys() | learned.keys(), key=lambda key: parse_batch_key(key)[1]):
        scored = [r for r in rewards.get(batch, []) if r is not None]
        row = {
            "batch_index": parse_batch_key(batch)[1],
            "batch": batch,
            "attempts": len(rewards.get(batch, [])),
            "passed": sum(passed(r) for r in scored),
            "reward_mean": sum(scored) / len(scored) if scored else None,
            "sampler": None,
            "groups_used": None,
            "groups_dropped": None,
            "datums": None,
            "tokens": None,
            "step_applied": None,
            "kl_sample_train_v1": None,
        }
        update = learned.get(batch)
        if update is not None:
            row |= {
                "attempts": update.attempts,
                "reward_mean": update.reward_mean,
                "sampler": update.sampler,
                "groups_used": update.groups_used,
                "groups_dropped": sum(update.groups_dropped.values()),
                "datums": update.datums,
                "tokens": _sampled_tokens(update),
                "step_applied": update.optimizer_step if update.status == "acknowledged" else None,
                "kl_sample_train_v1": update.kl_sample_train_v1,
            }
        series.append(row)
    return series


def metrics_document(engine: Engine, run: RunRecord) -> RunMetricsDocument:
    return RunMetricsDocument.model_validate(
        {
            "run_id": run.run_id,
            "kind": run.kind,
            "status": run.status,
            "batches": batch_series(engine, run.run_id),
        }
    )


def stop_cause(engine: Engine, run: RunRecord) -> StopDocument | None:
    """What stopped an interrupted or failed run: its last stop event's data."""
    if run.status not in ("interrupted", "failed"):
        return None
    stops = read_events(engine, run_id=run.run_id, kinds=STOP_EVENTS, limit=100_000)
    if not stops:
        return None
    data = stops[-1].data
    return StopDocument.model_validate(
        {"event": stops[-1].kind, "batch": data.get("batch"), "cause": data.get("cause")}
    )


def results_document(
    engine: Engine, store: ObjectStore, run: RunRecord, dagster_url: str
) -> RunResultsDocument:
    """`synth run show RUN --json`: the run's summary, per-task results, what stopped it
    and, for a training run, what each batch's update did."""
    results = collect_results(engine, store, run)
    learning = learning_rows(engine, run.run_id) if run.kind == "train" else []
    trials = store.uri(f"runs/{run.run_id}/trials")
    return RunResultsDocument.model_validate(
        {
            **RunSummary.of(run, dagster_url).model_dump(),
            "summary": results.summary.as_dict(),
            "stopped_by": stop_cause(engine, run),
            "batches_done": results.batches_done,
            "learning": learning,
            "learning_warnings": learning_warnings(learning),
            "tasks": [task.as_dict() for task in results.tasks],
            "trial_records": trials,
        }
    )


def assessments_document(
    engine: Engine, store: ObjectStore, run: RunRecord
) -> AssessmentComparison:
    """`synth run show --assessments`: every assessor of the run's work (its regrades),
    how often each pair agrees, and each task's verdicts by assessor."""
    from synth_pipelines.runtime.assessment_comparison import (
        agreements,
        assessment_sets,
        verdicts_by_task,
    )

    sets = assessment_sets(engine, store, run)
    return AssessmentComparison.model_validate(
        {
            "run_id": run.run_id,
            "assessment_sets": [
                {
                    "label": group.label,
                    "assessor": group.assessor,
                    "assessor_digest": group.assessor_digest,
                    "assessed": len(group.verdicts),
                    "pass_rate": group.pass_rate(),
                }
                for group in sets
            ],
            "agreements": [
                {
                    "first": pair.first,
                    "second": pair.second,
                    "compared": pair.compared,
                    "agreeing": pair.agreeing,
                    "rate": pair.rate,
                    "differing_tasks": list(pair.differing_tasks),
                }
                for pair in agreements(sets)
            ],
            "tasks": verdicts_by_task(sets),
        }
    )
