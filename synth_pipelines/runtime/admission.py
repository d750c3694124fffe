"""Resource admission: attempts start only while the run's budget has room for them.

Attempts are admitted against four separate limits (active attempts, CPU, memory,
storage). A request that does not fit waits while later, smaller ones that do fit
proceed, so several memory-heavy attempts can fill the RAM budget without stopping
light attempts from using free trial slots.

Two budgets stand between an attempt and its start: its run's own (`ResourceAdmission`,
in this process) and then its worker pool's (`PoolAdmission`), which every run on the
pool shares through leases in the control database.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Engine

from synth_pipelines.config import Settings
from synth_pipelines.contracts.admission_lease import ResourceDemand
from synth_pipelines.contracts.plan import ResourceBudget
from synth_pipelines.control.admission_leases import (
    release_lease,
    renew_lease,
    request_lease,
    try_admit,
)

logger = logging.getLogger(__name__)

# Waiting requests ask again soon at first, then at most this often.
LONGEST_POLL_SEC = 0.5


class DemandExceedsBudgetError(ValueError):
    pass


def refuse_oversized(demand: ResourceDemand, budget: ResourceBudget, what: str, whose: str) -> None:
    """Refuse up front a demand that could never be admitted."""
    if (
        demand.cpus > budget.cpus
        or demand.memory_mb > budget.memory_mb
        or demand.storage_mb > budget.storage_mb
    ):
        raise DemandExceedsBudgetError(
            f"{what} needs {demand.cpus} CPUs, {demand.memory_mb} MB memory and "
            f"{demand.storage_mb} MB storage, more than {whose} whole budget "
            f"({budget.cpus} CPUs, {budget.memory_mb} MB, {budget.storage_mb} MB); "
            f"raise {whose} budget or override the task's resources"
        )


class ResourceAdmission:
    def __init__(self, budget: ResourceBudget):
        self.budget = budget
        self.active = 0
        self.cpus = 0.0
        self.memory_mb = 0
        self.storage_mb = 0
        self._changed = asyncio.Condition()

    def _fits(self, demand: ResourceDemand) -> bool:
        return (
            self.active + 1 <= self.budget.max_active_attempts
            and self.cpus + demand.cpus <= self.budget.cpus + 1e-9
            and self.memory_mb + demand.memory_mb <= self.budget.memory_mb
            and self.storage_mb + demand.storage_mb <= self.budget.storage_mb
        )

    def check(self, demand: ResourceDemand, what: str) -> None:
        refuse_oversized(demand, self.budget, what, "the plan's")

    @asynccontextmanager
    async def admit(self, demand: ResourceDemand, what: str) -> AsyncIterator[None]:
        self.check(demand, what)
        async with self._changed:
            await self._changed.wait_for(lambda: self._fits(demand))
            self._take(demand, +1)
        try:
            yield
        finally:
            async with self._changed:
                self._take(demand, -1)
                self._changed.notify_all()

    def _take(self, demand: ResourceDemand, sign: int) -> None:
        self.active += sign
        self.cpus += sign * demand.cpus
        self.memory_mb += sign * demand.memory_mb
        self.storage_mb += sign * demand.storage_mb


@dataclass(frozen=True)
class WorkerPool:
    """The pool this process's attempts run in, and what all of them may hold at once."""

    name: str
    limits: ResourceBudget
    lease_ttl: timedelta

    @classmethod
    def configured(cls, settings: Settings) -> WorkerPool:
        return cls(
            name=settings.admission_pool,
            limits=ResourceBudget(
                max_active_attempts=settings.pool_max_active_attempts,
                cpus=settings.pool_cpus,
                memory_mb=settings.pool_memory_mb,
                storage_mb=settings.pool_storage_mb,
            ),
            lease_ttl=timedelta(seconds=settings.pool_lease_ttl_sec),
        )


class PoolAdmission:
    """Admission against a worker pool's budget, shared with every other process (and run)
    using the same pool through the control database."""

    def __init__(self, engine: Engine, pool: WorkerPool, holder: str | None = None):
        self.engine = engine
        self.pool = pool
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"

    @asynccontextmanager
    async def admit(
        self,
        demand: ResourceDemand,
        what: str,
        *,
        run_id: str | None = None,
        attempt_id: str | None = None,
    ) -> AsyncIterator[None]:
        pool = self.pool
        refuse_oversized(demand, pool.limits, what, f"worker pool {pool.name!r}'s")
        lease_id = await asyncio.to_thread(
            request_lease,
            self.engine,
            pool.name,
            self.holder,
            demand,
            pool.lease_ttl,
            run_id=run_id,
            attempt_id=attempt_id,
        )
        try:
            delay = 0.05
            while not await asyncio.to_thread(
                try_admit, self.engine, pool.name, lease_id, pool.limits, pool.lease_ttl
            ):
                await asyncio.sleep(delay)
                delay = min(delay * 2, LONGEST_POLL_SEC)
            renewing = asyncio.create_task(self._keep_renewed(lease_id, what))
            try:
                yield
            finally:
                renewing.cancel()
        finally:
            await asyncio.to_thread(release_lease, self.engine, lease_id)

    async def _keep_renewed(self, lease_id: str, what: str) -> None:
        interval = self.pool.lease_ttl.total_seconds() / 3
        while True:
            await asyncio.sleep(interval)
            try:
                renewed = await asyncio.to_thread(
                    renew_lease, self.engine, lease_id, self.pool.lease_ttl
                )
            except Exception as error:
                # A database hiccup: the lease still has two renewals' worth of time.
                logger.warning("renewing the admission lease of %s failed: %s", what, error)
                continue
            if not renewed:
                logger.warning(
                    "the admission lease of %s in pool %r expired and was reclaimed; "
                    "the pool may now admit more than its budget",
                    what,
                    self.pool.name,
                )
                return
