"""A batch's learning numbers are stored and reported as the batch recorded them, and read
back typed: a number a batch did not record reads as its default, never as a missing key."""

from __future__ import annotations

import json
from datetime import UTC

from sqlalchemy import select

from synth_pipelines.config import Settings
from synth_pipelines.contracts.batch_learning import BatchLearning
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.policy_updates import (
    acknowledge,
    find_update,
    mark_unresolved,
    record_without_step,
)
from synth_pipelines.control.schema import policy_updates

SIGNAL = BatchLearning(
    sampler="synth/qwen3-tiny",
    attempts=4,
    reward_mean=0.5,
    groups=2,
    groups_dropped={"constant reward": 1},
    new_datum_reasons={"delegated_agent": 2},
)


def _stored(run_id: str) -> dict:
    with control_engine(Settings()).connect() as conn:
        text = conn.execute(
            select(policy_updates.c.metrics_json).where(policy_updates.c.run_id == run_id)
        ).scalar_one()
    return json.loads(text)


def test_a_batch_without_a_step_stores_no_step_numbers(state):
    learning = SIGNAL.model_copy(update={"optimizer_step": False, "no_step_reason": "no signal"})
    record_without_step(
        control_engine(Settings()),
        "r-1",
        "r-1.b0000",
        0,
        "tinker://r-1/state/0",
        "no signal",
        learning,
    )
    assert _stored("r-1") == {
        "sampler": "synth/qwen3-tiny",
        "attempts": 4,
        "reward_mean": 0.5,
        "groups": 2,
        "groups_dropped": {"constant reward": 1},
        "new_datum_reasons": {"delegated_agent": 2},
        "optimizer_step": False,
        "no_step_reason": "no signal",
    }
    update = find_update(control_engine(Settings()), "r-1", "r-1.b0000")
    assert update is not None and update.metrics == learning
    assert update.metrics.learning_rate is None and update.metrics.frac_mixed == 0.0
    assert update.marked_at.tzinfo is UTC


def test_an_acknowledged_step_is_reported_with_exactly_the_numbers_stored(state):
    engine = control_engine(Settings())
    mark_unresolved(engine, "r-1", "r-1.b0000", 0, datums=4)
    unresolved = find_update(engine, "r-1", "r-1.b0000")
    assert unresolved is not None and unresolved.metrics == BatchLearning()
    learning = SIGNAL.model_copy(update={"optimizer_step": True, "loss": -0.5, "grad_norm": None})
    acknowledge(engine, "r-1", "r-1.b0000", "tinker://r-1/state/0", learning)
    (event,) = read_events(engine, run_id="r-1", kinds=("update.acknowledged",))
    assert event.data == {"batch": "r-1.b0000", "state": "tinker://r-1/state/0", **_stored("r-1")}
    assert set(_stored("r-1")) == set(SIGNAL.recorded()) | {"optimizer_step", "loss", "grad_norm"}
    assert event.created_at.tzinfo is UTC
