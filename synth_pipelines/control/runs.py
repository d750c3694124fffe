"""Durable acceptance and lifecycle of runs.

Acceptance is one transaction: the run row with its pinned spec and the creation
event. A retry with the same idempotency key returns the run it created.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, select, update
from sqlalchemy.exc import IntegrityError

from synth_pipelines.contracts.run_record import ACTIVE, RunRecord
from synth_pipelines.contracts.run_spec import RunRequest, RunSpec
from synth_pipelines.control.events import append_event
from synth_pipelines.control.schema import runs

CANDIDATES_SHOWN = 10
"""An ambiguous prefix names at most this many of the runs it matches."""


class RunNotFoundError(LookupError):
    pass


class AmbiguousRunIdError(LookupError):
    """A prefix that more than one of the owner's runs starts with."""


class IdempotencyConflictError(ValueError):
    pass


def _find_by_key(engine: Engine, owner: str, key: str) -> RunRecord | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(runs).where(runs.c.owner == owner, runs.c.idempotency_key == key)
        ).first()
    return RunRecord.model_validate(row, from_attributes=True) if row else None


def request_differences(before: RunRequest, after: RunRequest) -> list[str]:
    """What `after` asks differently from `before`, field by field (a plan's and a
    profile's by their own fields), each as `field: before -> after`."""
    first = before.model_dump(mode="json", include=set(RunRequest.model_fields))
    second = after.model_dump(mode="json", include=set(RunRequest.model_fields))
    found: list[str] = []
    for name in RunRequest.model_fields:
        was, now = first.get(name), second.get(name)
        if was == now:
            continue
        if name in ("actor", "judge"):
            found.append(f"{name}: {_pinned(was)} -> {_pinned(now)}")
        elif isinstance(was, dict) and isinstance(now, dict):
            found += [
                f"{name}.{field}: {json.dumps(was.get(field))} -> {json.dumps(now.get(field))}"
                for field in sorted(set(was) | set(now))
                if was.get(field) != now.get(field)
            ]
        else:
            found.append(f"{name}: {json.dumps(was)} -> {json.dumps(now)}")
    return found


def _pinned(profile: dict[str, str] | None) -> str:
    """A pinned profile as a person reads it: its name, version and digest's start."""
    if profile is None:
        return "none"
    return f"{profile['name']}@{profile['version']} ({profile['digest'][:19]})"


def _check_same_request(existing: RunRecord, request: RunRequest, key: str) -> RunRecord:
    if existing.request_digest != request.digest():
        differences = request_differences(existing.spec, request) or ["its digest"]
        raise IdempotencyConflictError(
            f"idempotency key {key!r} already belongs to run {existing.run_id}, which was "
            f"submitted differently ({'; '.join(differences)}); use a new key"
        )
    return existing


def accept_run(
    engine: Engine,
    request: RunRequest,
    idempotency_key: str | None = None,
    before_create: Callable[[], None] = lambda: None,
    *,
    org: str,
) -> tuple[RunRecord, bool]:
    """Pin and record a run of `org` (the submitting key's organization, whose limits it
    is admitted under); returns (run, created). A known key returns its run;
    `before_create` runs (and may refuse) only when a new run is to be recorded."""
    key = idempotency_key or uuid.uuid4().hex
    digest = request.digest()
    existing = _find_by_key(engine, request.owner, key)
    if existing is not None:
        return _check_same_request(existing, request, key), False
    before_create()
    now = datetime.now(UTC)
    spec = RunSpec(**request.model_dump(), run_id=f"r-{uuid.uuid4().hex[:12]}", accepted_at=now)
    try:
        with engine.begin() as conn:
            conn.execute(
                runs.insert().values(
                    run_id=spec.run_id,
                    owner=request.owner,
                    org=org,
                    idempotency_key=key,
                    request_digest=digest,
                    kind=spec.kind,
                    status="accepted",
                    batch_count=spec.batch_count,
                    spec_json=spec.model_dump_json(),
                    created_at=now,
                    updated_at=now,
                )
            )
            append_event(
                conn,
                spec.run_id,
                "run.accepted",
                {
                    "kind": spec.kind,
                    "dataset": spec.dataset.ref,
                    "actor": f"{spec.actor.name}@{spec.actor.version}",
                    "actor_digest": spec.actor.digest,
                    "batches": spec.batch_count,
                    "request_digest": digest,
                    "org": org,
                },
            )
    except IntegrityError:
        # A concurrent submission with the same key won the race: return its run.
        winner = _find_by_key(engine, request.owner, key)
        if winner is None:
            raise
        return _check_same_request(winner, request, key), False
    record = get_run(engine, spec.run_id)
    return record, True


# Built once: the gateway reads a run on every request about one.
_BY_ID = select(runs).where(runs.c.run_id == bindparam("run_id"))


def get_run(engine: Engine, run_id: str) -> RunRecord:
    with engine.connect() as conn:
        row = conn.execute(_BY_ID, {"run_id": run_id}).first()
    if row is None:
        raise RunNotFoundError(f"no run {run_id!r}; `synth run list` shows the known runs")
    return RunRecord.model_validate(row, from_attributes=True)


def find_run(conn: Connection, text: str, owner: str) -> RunRecord:
    """The run `text` names: by its whole id (its owner is checked by the caller), or by a
    prefix that exactly one of `owner`'s runs starts with. On the caller's connection, as
    the gateway finds the run on the one it checked the key on."""
    row = conn.execute(_BY_ID, {"run_id": text}).first()
    if row is None:
        # Only the owner's runs are candidates: a prefix must not reveal other owners' ids.
        rows = conn.execute(
            select(runs)
            .where(runs.c.owner == owner, runs.c.run_id.startswith(text, autoescape=True))
            .order_by(runs.c.run_id)
            .limit(CANDIDATES_SHOWN + 1)
        ).all()
        if len(rows) == 1 and text:
            row = rows[0]
        elif not rows or not text:
            raise RunNotFoundError(f"no run {text!r}; `synth run list` shows the known runs")
        else:
            shown = ", ".join(candidate.run_id for candidate in rows[:CANDIDATES_SHOWN])
            more = " and more" if len(rows) > CANDIDATES_SHOWN else ""
            raise AmbiguousRunIdError(
                f"run id prefix {text!r} matches several runs: {shown}{more}; give more of the id"
            )
    return RunRecord.model_validate(row, from_attributes=True)


def active_runs(engine: Engine) -> list[RunRecord]:
    """Every owner's runs that are accepted or running, oldest first."""
    query = select(runs).where(runs.c.status.in_(ACTIVE)).order_by(runs.c.created_at)
    with engine.connect() as conn:
        return [
            RunRecord.model_validate(row, from_attributes=True) for row in conn.execute(query).all()
        ]


def list_runs(
    engine: Engine,
    owner: str | None = None,
    limit: int = 50,
    *,
    kind: str | None = None,
    status: str | None = None,
) -> list[RunRecord]:
    query = select(runs).order_by(runs.c.created_at.desc()).limit(limit)
    if owner is not None:
        query = query.where(runs.c.owner == owner)
    if kind is not None:
        query = query.where(runs.c.kind == kind)
    if status is not None:
        query = query.where(runs.c.status == status)
    with engine.connect() as conn:
        return [
            RunRecord.model_validate(row, from_attributes=True) for row in conn.execute(query).all()
        ]


def transition(
    engine: Engine,
    run_id: str,
    status: str,
    event: str,
    data: dict[str, Any] | None = None,
    *,
    from_status: tuple[str, ...] = ACTIVE,
) -> bool:
    """Move a run to `status` with its event if it is in one of `from_status`.

    Final states are never left, so a late or repeated transition is a no-op."""
    with engine.begin() as conn:
        return transition_in(conn, run_id, status, event, data, from_status=from_status)


def transition_in(
    conn: Connection,
    run_id: str,
    status: str,
    event: str,
    data: dict[str, Any] | None = None,
    *,
    from_status: tuple[str, ...] = ACTIVE,
) -> bool:
    """`transition`, inside the caller's transaction."""
    changed = conn.execute(
        update(runs)
        .where(runs.c.run_id == run_id, runs.c.status.in_(from_status))
        .values(status=status, updated_at=datetime.now(UTC))
    ).rowcount
    if changed:
        append_event(conn, run_id, event, data or {})
    return bool(changed)
