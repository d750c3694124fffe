"""Claims of batches by workers, and the fence every write of a claimed batch passes.

A worker claims a batch in one transaction that creates its worker attempt with a
lease; it renews the lease on each heartbeat, whose reply also carries cancellation.
Every progress append and the completion run inside a transaction that locks the worker
attempt and checks that it is active and is its batch's newest claim: a worker presumed
dead, superseded by a later claim, and then back (a paused process, a partitioned host)
has its write refused, and the refusal is recorded on the run. Progress is deduplicated
by the worker attempt's own sequence number, so a retried append lands once.

Every transaction here takes the run's worker lock first, so claims, heartbeats, appends
and completions of one run are totally ordered on PostgreSQL as on SQLite.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select, update

from synth_pipelines.contracts.run_record import ACTIVE
from synth_pipelines.contracts.run_spec import RunSpec, batch_key
from synth_pipelines.contracts.worker_attempt import Heartbeat, WorkerAdvertisement, WorkerAttempt
from synth_pipelines.control.database import exclusive_transaction, named_lock
from synth_pipelines.control.events import append_event, record_event
from synth_pipelines.control.runs import transition_in
from synth_pipelines.control.schema import run_events, runs, worker_attempts, worker_progress


class ClaimRefusedError(RuntimeError):
    """The batch cannot be claimed now; nothing was written."""


class StaleWorkerError(RuntimeError):
    """A write by a worker attempt that no longer holds its batch; it was refused and the
    refusal recorded on the run."""


class ProgressBoundaryError(RuntimeError):
    """A completion whose worker sent progress the database does not hold (or holds more
    of than the worker says it sent): the batch is not complete."""


def worker_lock(run_id: str) -> int:
    return named_lock(f"worker:{run_id}")


def requirements_unmet(spec: RunSpec, advertised: WorkerAdvertisement) -> list[str]:
    """What the batch pinned that the worker does not advertise (empty: it may claim)."""
    unmet = []
    pinned = (spec.actor, *((spec.judge,) if spec.judge else ()))
    engines = {profile.profile().engine for profile in pinned}
    unmet += [f"engine {engine}" for engine in sorted(engines) if engine not in advertised.engines]
    provider = getattr(spec.plan, "environment", None)
    if provider is not None and provider.provider not in advertised.providers:
        unmet.append(f"sandbox provider {provider.provider}")
    if spec.judge is not None and not advertised.judges:
        unmet.append("judge support")
    return unmet


def claim_batch(
    engine: Engine,
    spec: RunSpec,
    index: int,
    advertised: WorkerAdvertisement,
    *,
    lease_sec: float,
) -> WorkerAttempt:
    """Claim batch `index` of the run for `advertised`'s worker, or say why not.

    Claimable: the run is active, the batch is not completed, the batch before it is
    (its update acknowledged and checkpoint committed, for training: one transaction
    records those with the completion), and no other worker attempt holds an unexpired
    lease on it. An expired holder is superseded in the same transaction, the attempts
    it started and did not finish recorded as platform errors."""
    unmet = requirements_unmet(spec, advertised)
    key = batch_key(spec.run_id, index)
    if unmet:
        raise ClaimRefusedError(
            f"worker {advertised.worker} cannot run batch {key}: it lacks {', '.join(unmet)}"
        )
    with exclusive_transaction(engine, worker_lock(spec.run_id)) as conn:
        status = _locked_run_status(conn, spec.run_id)
        if status not in ACTIVE:
            raise ClaimRefusedError(f"batch {key} will not start: run {spec.run_id} is {status}")
        completed = completed_batches(conn, spec.run_id)
        if key in completed:
            raise ClaimRefusedError(f"batch {key} is already completed")
        if index > 0 and batch_key(spec.run_id, index - 1) not in completed:
            raise ClaimRefusedError(
                f"batch {key} is not claimable yet: batch {index - 1} is not completed"
            )
        now = datetime.now(UTC)
        holder = _newest(conn, key)
        if holder is not None and holder.status == "active":
            if holder.lease_expires_at > now:
                raise ClaimRefusedError(
                    f"batch {key} is held by worker {holder.worker} (worker attempt "
                    f"{holder.worker_attempt_id}) until {holder.lease_expires_at.isoformat()}"
                )
            _supersede(conn, holder)
        number = holder.attempt_number + 1 if holder is not None else 1
        attempt_id = f"{key}.w{number:03d}"
        conn.execute(
            insert(worker_attempts).values(
                worker_attempt_id=attempt_id,
                run_id=spec.run_id,
                batch=key,
                batch_index=index,
                attempt_number=number,
                worker=advertised.worker,
                advertised_json=advertised.model_dump_json(),
                status="active",
                claimed_at=now,
                lease_expires_at=now + timedelta(seconds=lease_sec),
            )
        )
        transition_in(conn, spec.run_id, "running", "run.started", {}, from_status=("accepted",))
        append_event(
            conn,
            spec.run_id,
            "batch.claimed",
            {
                "batch": key,
                "index": index,
                "worker_attempt": attempt_id,
                "attempt_number": number,
                "worker": advertised.worker,
                "lease_sec": lease_sec,
            },
        )
        claimed = _newest(conn, key)
    assert claimed is not None
    return claimed


def renew_lease(engine: Engine, attempt: WorkerAttempt, *, lease_sec: float) -> Heartbeat:
    """A heartbeat: renew the attempt's lease while it holds its batch and its run is
    active; tell it to cancel once the run was cancelled, or that it was superseded."""
    with exclusive_transaction(engine, worker_lock(attempt.run_id)) as conn:
        held, holder = _locked_with_holder(conn, attempt)
        if not _holds(held, holder):
            return Heartbeat(
                action="superseded",
                lease_expires_at=held.lease_expires_at,
                reason=held.end_reason or f"batch {attempt.batch} is held by a later claim",
            )
        expires = datetime.now(UTC) + timedelta(seconds=lease_sec)
        conn.execute(
            update(worker_attempts)
            .where(worker_attempts.c.worker_attempt_id == attempt.worker_attempt_id)
            .values(lease_expires_at=expires)
        )
        status = _locked_run_status(conn, attempt.run_id)
    if status not in ACTIVE:
        return Heartbeat(action="cancel", lease_expires_at=expires, reason=f"run is {status}")
    return Heartbeat(action="continue", lease_expires_at=expires)


def append_progress(
    engine: Engine, attempt: WorkerAttempt, local_seq: int, kind: str, data: dict[str, Any]
) -> int:
    """Append one progress event of the attempt's batch; its seq. A retry with the same
    `local_seq` returns the seq of the event the first one appended and adds none."""

    def append(conn: Connection, _held: WorkerAttempt) -> int:
        landed = _landed(conn, attempt, local_seq)
        if landed is not None:
            return landed
        seq = append_event(
            conn,
            attempt.run_id,
            kind,
            {**data, "worker_attempt": attempt.worker_attempt_id, "local_seq": local_seq},
        )
        conn.execute(
            insert(worker_progress).values(
                worker_attempt_id=attempt.worker_attempt_id, local_seq=local_seq, event_seq=seq
            )
        )
        return seq

    return _fenced(
        engine, attempt, kind, append, settled=lambda conn, _held: _landed(conn, attempt, local_seq)
    )


def complete_batch(
    engine: Engine,
    attempt: WorkerAttempt,
    spec: RunSpec,
    *,
    progress_seq: int,
    summary: dict[str, Any],
) -> bool:
    """Record the attempt's batch as done and end the attempt, together; the run
    succeeds with its last batch in the same transaction. Only the batch's current
    attempt completes it, only while the run is active, only once, and only once the
    database holds all `progress_seq` progress events the worker sent. Returns
    whether this call recorded it."""

    def complete(conn: Connection, held: WorkerAttempt) -> bool:
        status = _locked_run_status(conn, spec.run_id)
        if status not in ACTIVE or attempt.batch in completed_batches(conn, spec.run_id):
            return False
        landed = conn.execute(
            select(func.count()).where(
                worker_progress.c.worker_attempt_id == attempt.worker_attempt_id
            )
        ).scalar_one()
        if landed != progress_seq:
            raise ProgressBoundaryError(
                f"batch {attempt.batch}: worker attempt {attempt.worker_attempt_id} sent "
                f"{progress_seq} progress events, the database holds {landed}"
            )
        append_event(
            conn,
            spec.run_id,
            "batch.completed",
            {
                "batch": attempt.batch,
                "index": attempt.batch_index,
                "worker_attempt": attempt.worker_attempt_id,
                **summary,
            },
        )
        _end(conn, attempt, "completed", None)
        if attempt.batch_index == spec.batch_count - 1:
            transition_in(
                conn, spec.run_id, "succeeded", "run.succeeded", {"batches": spec.batch_count}
            )
        return True

    return _fenced(
        engine,
        attempt,
        "batch.completed",
        complete,
        settled=lambda _conn, held: False if held.status == "completed" else None,
    )


def end_attempt(
    engine: Engine, attempt: WorkerAttempt, status: str, reason: str, data: dict[str, Any]
) -> None:
    """The worker ends its own attempt short of completion (`cancelled`, `failed`), with
    what it finished, as one event."""

    def end(conn: Connection, _held: WorkerAttempt) -> None:
        append_event(
            conn,
            attempt.run_id,
            f"worker.{status}",
            {
                "batch": attempt.batch,
                "worker_attempt": attempt.worker_attempt_id,
                "reason": reason,
                **data,
            },
        )
        _end(conn, attempt, status, reason)

    _fenced(engine, attempt, f"worker.{status}", end)


def end_active_attempts(conn: Connection, run_id: str, status: str, reason: str) -> list[str]:
    """Inside the caller's transaction (holding the run's worker lock): end every active
    worker attempt of the run, as an interruption does; the ids ended."""
    ended = conn.execute(
        select(worker_attempts.c.worker_attempt_id).where(
            worker_attempts.c.run_id == run_id, worker_attempts.c.status == "active"
        )
    ).scalars()
    ids = list(ended)
    if ids:
        conn.execute(
            update(worker_attempts)
            .where(worker_attempts.c.worker_attempt_id.in_(ids))
            .values(status=status, ended_at=datetime.now(UTC), end_reason=reason)
        )
    return ids


def run_worker_attempts(engine: Engine, run_id: str) -> list[WorkerAttempt]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(worker_attempts)
            .where(worker_attempts.c.run_id == run_id)
            .order_by(worker_attempts.c.batch_index, worker_attempts.c.attempt_number)
        ).all()
    return [WorkerAttempt.model_validate(row, from_attributes=True) for row in rows]


def completed_batches(conn: Connection, run_id: str) -> set[str]:
    done = conn.execute(
        select(run_events.c.data_json).where(
            run_events.c.run_id == run_id, run_events.c.kind == "batch.completed"
        )
    ).scalars()
    return {json.loads(data)["batch"] for data in done}


def _fenced[T](
    engine: Engine,
    attempt: WorkerAttempt,
    tried: str,
    write: Callable[[Connection, WorkerAttempt], T],
    *,
    settled: Callable[[Connection, WorkerAttempt], T | None] = lambda conn, held: None,
) -> T:
    """Run `write` in a transaction holding the run's worker lock and the attempt's row,
    if the attempt still holds its batch. Otherwise the answer is `settled`'s, when the
    write already happened while the attempt held the batch (a retry); and failing that
    the write is refused, and the refusal recorded (in a transaction of its own, after
    the refused one rolled back)."""
    with exclusive_transaction(engine, worker_lock(attempt.run_id)) as conn:
        held, holder = _locked_with_holder(conn, attempt)
        if _holds(held, holder):
            return write(conn, held)
        answer = settled(conn, held)
        if answer is not None:
            return answer
    refusal = {
        "batch": attempt.batch,
        "worker_attempt": attempt.worker_attempt_id,
        "worker": attempt.worker,
        "tried": tried,
        "attempt_status": held.status,
        "holder": holder,
    }
    record_event(engine, attempt.run_id, "worker.refused", refusal)
    raise StaleWorkerError(
        f"worker attempt {attempt.worker_attempt_id} may not write {tried}: it is "
        f"{held.status}, and batch {attempt.batch} is held by {holder}"
    )


def _landed(conn: Connection, attempt: WorkerAttempt, local_seq: int) -> int | None:
    seq = conn.execute(
        select(worker_progress.c.event_seq).where(
            worker_progress.c.worker_attempt_id == attempt.worker_attempt_id,
            worker_progress.c.local_seq == local_seq,
        )
    ).scalar()
    return None if seq is None else int(seq)


def _locked_with_holder(
    conn: Connection, attempt: WorkerAttempt
) -> tuple[WorkerAttempt, str | None]:
    """The attempt as the database holds it, its row locked, and the id of its batch's
    newest claim."""
    row = conn.execute(
        select(worker_attempts)
        .where(worker_attempts.c.worker_attempt_id == attempt.worker_attempt_id)
        .with_for_update()
    ).one()
    newest = _newest(conn, attempt.batch)
    held = WorkerAttempt.model_validate(row, from_attributes=True)
    return held, newest.worker_attempt_id if newest is not None else None


def _holds(held: WorkerAttempt, holder: str | None) -> bool:
    """An attempt holds its batch while it is active and the batch's newest claim."""
    return held.status == "active" and holder == held.worker_attempt_id


def _locked_run_status(conn: Connection, run_id: str) -> str:
    status = conn.execute(
        select(runs.c.status).where(runs.c.run_id == run_id).with_for_update()
    ).scalar_one()
    return str(status)


def _newest(conn: Connection, batch: str) -> WorkerAttempt | None:
    row = conn.execute(
        select(worker_attempts)
        .where(worker_attempts.c.batch == batch)
        .order_by(worker_attempts.c.attempt_number.desc())
        .limit(1)
    ).first()
    return WorkerAttempt.model_validate(row, from_attributes=True) if row is not None else None


def _end(conn: Connection, attempt: WorkerAttempt, status: str, reason: str | None) -> None:
    conn.execute(
        update(worker_attempts)
        .where(worker_attempts.c.worker_attempt_id == attempt.worker_attempt_id)
        .values(status=status, ended_at=datetime.now(UTC), end_reason=reason)
    )


def _supersede(conn: Connection, holder: WorkerAttempt) -> None:
    """End an expired holder; the attempts it started (its `batch.started` names them)
    and had not finished end as platform errors, never with rewards."""
    progress = conn.execute(
        select(run_events.c.kind, run_events.c.data_json)
        .join(worker_progress, worker_progress.c.event_seq == run_events.c.seq)
        .where(
            worker_progress.c.worker_attempt_id == holder.worker_attempt_id,
            run_events.c.kind.in_(("batch.started", "attempt.finished")),
        )
    ).all()
    started = [
        attempt
        for kind, data in progress
        if kind == "batch.started"
        for attempt in json.loads(data).get("attempt_ids", [])
    ]
    done = {json.loads(data)["attempt_id"] for kind, data in progress if kind == "attempt.finished"}
    reason = (
        f"lease expired at {holder.lease_expires_at.isoformat()} with no heartbeat; "
        "superseded by a later claim"
    )
    _end(conn, holder, "superseded", reason)
    append_event(
        conn,
        holder.run_id,
        "worker.superseded",
        {
            "batch": holder.batch,
            "worker_attempt": holder.worker_attempt_id,
            "worker": holder.worker,
            "reason": reason,
            "finished_attempts": len(done),
            "platform_errors": [attempt for attempt in started if attempt not in done],
        },
    )
