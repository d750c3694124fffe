"""Resource admission: attempts start only while the run's budget has room for them.

Attempts are admitted against four separate limits (active attempts, CPU, memory,
storage). A request that does not fit waits while later, smaller ones that do fit
proceed, so several memory-heavy attempts can fill the RAM budget without stopping
light attempts from using free trial slots.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from synth_pipelines.contracts.plan import ResourceBudget


@dataclass(frozen=True)
class ResourceDemand:
    cpus: float
    memory_mb: int
    storage_mb: int


class DemandExceedsBudgetError(ValueError):
    pass


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
        """Refuse up front a demand that could never be admitted."""
        budget = self.budget
        if (
            demand.cpus > budget.cpus
            or demand.memory_mb > budget.memory_mb
            or demand.storage_mb > budget.storage_mb
        ):
            raise DemandExceedsBudgetError(
                f"{what} needs {demand.cpus} CPUs, {demand.memory_mb} MB memory and "
                f"{demand.storage_mb} MB storage, more than the plan's whole budget "
                f"({budget.cpus} CPUs, {budget.memory_mb} MB, {budget.storage_mb} MB); "
                "raise the plan's budget or override the task's resources"
            )

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
