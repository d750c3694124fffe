"""Admitting accepted runs under their organizations' limits on concurrent runs.

An accepted run waits in line until its organization has fewer running runs than its
limit, then is admitted (its `admitted_at` is set) and the batch gate launches it. A run
holds its organization's slot while it is admitted and accepted, or running; it gives it
back when it ends or is interrupted. A resumed run takes its slot back at once: it was
admitted before, and the limit holds new runs in line until the organization is under it.

Every decision is one transaction no other admission interleaves with
(`exclusive_transaction`), so two decisions never both take an organization's last slot.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, Connection, Engine, and_, or_, select, update

from synth_pipelines.control.database import RUN_ADMISSION_LOCK, exclusive_transaction
from synth_pipelines.control.events import append_event
from synth_pipelines.control.org_limits import limits_of
from synth_pipelines.control.schema import runs

HOLDS_A_SLOT = or_(
    runs.c.status == "running", and_(runs.c.status == "accepted", runs.c.admitted_at.is_not(None))
)
WAITS_IN_LINE = and_(runs.c.status == "accepted", runs.c.admitted_at.is_(None))


@dataclass(frozen=True)
class RunAdmissions:
    admitted: list[str]
    """Runs admitted by this decision (oldest first within an organization): the batch
    gate launches them."""
    waiting: list[str]
    """Runs still in line for their organization's limit."""


def runs_by_org(conn: Connection, which: ColumnElement[bool]) -> dict[str, list[str]]:
    """The ids of the runs `which` selects (`HOLDS_A_SLOT`, `WAITS_IN_LINE`), oldest
    first, by organization."""
    found: dict[str, list[str]] = defaultdict(list)
    rows = conn.execute(
        select(runs.c.run_id, runs.c.org).where(which).order_by(runs.c.created_at, runs.c.run_id)
    )
    for run_id, org in rows:
        found[org].append(run_id)
    return found


def _queued_reason(org: str, running: int, limit: int) -> str:
    return (
        f"organization {org} has {running} runs running and a limit of {limit}; this run "
        "waits in line and starts when one of them ends (`synth pool show` lists the line)"
    )


def admit_waiting_runs(engine: Engine, announce: Collection[str] = ()) -> RunAdmissions:
    """Admit every waiting run whose organization has room, oldest first. A run of
    `announce` (just accepted) that must wait gets a `run.queued` event saying why; a run
    admitted after it waited gets `run.admitted`."""
    with exclusive_transaction(engine, RUN_ADMISSION_LOCK) as conn:
        holding = runs_by_org(conn, HOLDS_A_SLOT)
        waiting_by_org = runs_by_org(conn, WAITS_IN_LINE)
        limits = limits_of(conn, waiting_by_org)
        now = datetime.now(UTC)
        admitted: list[str] = []
        waiting: list[str] = []
        for org, line in waiting_by_org.items():
            limit = limits[org].max_concurrent_runs
            for run_id in line:
                running = len(holding[org])
                if limit is not None and running >= limit:
                    waiting.append(run_id)
                    if run_id in announce:
                        append_event(
                            conn,
                            run_id,
                            "run.queued",
                            {
                                "org": org,
                                "running": running,
                                "limit": limit,
                                "reason": _queued_reason(org, running, limit),
                            },
                        )
                    continue
                conn.execute(update(runs).where(runs.c.run_id == run_id).values(admitted_at=now))
                holding[org].append(run_id)
                admitted.append(run_id)
                if run_id not in announce:
                    append_event(conn, run_id, "run.admitted", {"org": org})
    return RunAdmissions(admitted, waiting)
