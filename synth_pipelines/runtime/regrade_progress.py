"""A regrade's counts so far (`run progress`, kind "regrade"): its assessed batches and
their assessments, from its `regrade.batch_assessed` events, against every attempt its
run's batches recorded. A batch assessed again (a retried partition) replaces its earlier
count."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from synth_pipelines.contracts.documents import RunProgressDocument
from synth_pipelines.contracts.regrade import Regrade
from synth_pipelines.control.batch_results import read_batch_results
from synth_pipelines.control.events import read_events


def _assessed_batches(engine: Engine, regrade: Regrade) -> dict[str, dict[str, Any]]:
    """Each batch the regrade assessed: the last assessment event recorded for it."""
    assessed: dict[str, dict[str, Any]] = {}
    cursor = 0
    kinds = ("regrade.batch_assessed",)
    while events := read_events(engine, run_id=regrade.run_id, after=cursor, kinds=kinds):
        for event in events:
            cursor = event.seq
            if event.data.get("regrade_id") == regrade.regrade_id:
                assessed[event.data["batch"]] = event.data
    return assessed


def regrade_progress(engine: Engine, regrade: Regrade, status: str) -> RunProgressDocument:
    """The regrade's counts after every batch assessed so far, with `status`, its
    backfill's."""
    # A regrade starts once every batch's trials are stored: their tally is final.
    tallies = read_batch_results(engine, regrade.run_id).values()
    assessed = _assessed_batches(engine, regrade).values()
    return RunProgressDocument(
        run_id=regrade.run_id,
        kind="regrade",
        status=status,
        batches_done=len(assessed),
        batches_total=regrade.batches,
        attempts_done=sum(data["attempts"] for data in assessed),
        attempts_total=sum(tally.outcomes.attempts for tally in tallies),
        passed=sum(data["passed"] for data in assessed),
        reward_mean=None,
        step_applied=None,
        steps_done=None,
        steps_total=None,
    )
