"""The boundary around a remote optimizer step.

Before `optim_step` is enqueued the update is durably marked unresolved; its
acknowledgement (with the trainer state saved after it) is recorded separately. An
unresolved update blocks automatic continuation: a missing acknowledgement is never
taken as permission to repeat the update or to advance the dataset cursor. Only an
operator resolves it, by marking it applied (naming the saved state) or discarding it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import Engine, insert, select, update

from synth_pipelines.contracts.batch_learning import BatchLearning
from synth_pipelines.contracts.policy_update import PolicyUpdate
from synth_pipelines.control.events import append_event
from synth_pipelines.control.schema import policy_updates


class UnresolvedUpdateError(RuntimeError):
    pass


def find_update(engine: Engine, run_id: str, batch: str) -> PolicyUpdate | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(policy_updates).where(
                policy_updates.c.run_id == run_id, policy_updates.c.batch == batch
            )
        ).first()
    return PolicyUpdate.model_validate(row, from_attributes=True) if row else None


def run_updates(engine: Engine, run_id: str) -> list[PolicyUpdate]:
    """Every update of the run, in batch order."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(policy_updates)
            .where(policy_updates.c.run_id == run_id)
            .order_by(policy_updates.c.batch_index)
        ).all()
    return [PolicyUpdate.model_validate(row, from_attributes=True) for row in rows]


def unresolved_updates(engine: Engine, run_id: str) -> list[PolicyUpdate]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(policy_updates).where(
                policy_updates.c.run_id == run_id, policy_updates.c.status == "unresolved"
            )
        ).all()
    return [PolicyUpdate.model_validate(row, from_attributes=True) for row in rows]


def refuse_if_unresolved(engine: Engine, run_id: str) -> None:
    for pending in unresolved_updates(engine, run_id):
        raise UnresolvedUpdateError(
            f"run {run_id} has an unresolved policy update at batch {pending.batch} (marked "
            f"{pending.marked_at:%Y-%m-%d %H:%M:%S} UTC, {pending.datums} datums): its optimizer "
            "step may or may not have been applied, so training will not continue on its own. "
            f"Inspect it with `synth train resolve {run_id} --inspect`, then either "
            f"`synth train resolve {run_id} --discard` (redo the batch's update from the "
            f"previous checkpoint) or `synth train resolve {run_id} --applied STATE_PATH` "
            "(it was applied and saved there)."
        )


def mark_unresolved(engine: Engine, run_id: str, batch: str, index: int, datums: int) -> None:
    now = datetime.now(UTC)
    with engine.begin() as conn:
        existing = conn.execute(
            select(policy_updates.c.status).where(
                policy_updates.c.run_id == run_id, policy_updates.c.batch == batch
            )
        ).scalar_one_or_none()
        if existing is None:
            conn.execute(
                insert(policy_updates).values(
                    run_id=run_id,
                    batch=batch,
                    batch_index=index,
                    status="unresolved",
                    datums=datums,
                    metrics_json="{}",
                    marked_at=now,
                )
            )
        elif existing == "discarded":
            conn.execute(
                update(policy_updates)
                .where(policy_updates.c.run_id == run_id, policy_updates.c.batch == batch)
                .values(status="unresolved", datums=datums, marked_at=now, resolution=None)
            )
        else:
            raise UnresolvedUpdateError(
                f"the policy update of {batch} is already {existing}; it is never repeated"
            )
        append_event(conn, run_id, "update.unresolved", {"batch": batch, "datums": datums})


def acknowledge(
    engine: Engine, run_id: str, batch: str, state_path: str, learning: BatchLearning
) -> None:
    with engine.begin() as conn:
        changed = conn.execute(
            update(policy_updates)
            .where(
                policy_updates.c.run_id == run_id,
                policy_updates.c.batch == batch,
                policy_updates.c.status == "unresolved",
            )
            .values(
                status="acknowledged",
                state_path=state_path,
                metrics_json=json.dumps(learning.recorded(), sort_keys=True),
                resolved_at=datetime.now(UTC),
            )
        ).rowcount
        if not changed:
            raise UnresolvedUpdateError(f"no unresolved update of {batch} to acknowledge")
        append_event(
            conn,
            run_id,
            "update.acknowledged",
            {"batch": batch, "state": state_path, **learning.recorded()},
        )


def record_without_step(
    engine: Engine,
    run_id: str,
    batch: str,
    index: int,
    state_path: str,
    reason: str,
    learning: BatchLearning,
) -> None:
    """A batch with no eligible learning contributions: no optimizer step is enqueued, and
    the run says so (`batch.no_signal`): for a recipe, that is a failure to report."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(
            insert(policy_updates).values(
                run_id=run_id,
                batch=batch,
                batch_index=index,
                status="acknowledged",
                datums=0,
                state_path=state_path,
                metrics_json=json.dumps(learning.recorded(), sort_keys=True),
                marked_at=now,
                resolved_at=now,
                resolution=reason,
            )
        )
        append_event(
            conn, run_id, "batch.no_signal", {"batch": batch, "state": state_path, "reason": reason}
        )


def resolve(
    engine: Engine, run_id: str, *, applied_state: str | None = None, note: str = ""
) -> PolicyUpdate:
    """An operator's decision about the run's unresolved update."""
    pending = unresolved_updates(engine, run_id)
    if not pending:
        raise UnresolvedUpdateError(f"run {run_id} has no unresolved policy update")
    (target,) = pending
    status = "acknowledged" if applied_state else "discarded"
    resolution = (
        f"marked applied by the operator, state {applied_state}"
        if applied_state
        else "discarded by the operator; the batch's update is redone from the previous state"
    ) + (f" ({note})" if note else "")
    with engine.begin() as conn:
        conn.execute(
            update(policy_updates)
            .where(policy_updates.c.run_id == run_id, policy_updates.c.batch == target.batch)
            .values(
                status=status,
                state_path=applied_state,
                resolution=resolution,
                resolved_at=datetime.now(UTC),
            )
        )
        append_event(
            conn,
            run_id,
            f"update.{'applied' if applied_state else 'discarded'}",
            {"batch": target.batch, "resolution": resolution},
        )
    found = find_update(engine, run_id, target.batch)
    assert found is not None
    return found
