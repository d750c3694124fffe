import asyncio

import pytest

from synth_pipelines.contracts.plan import ResourceBudget
from synth_pipelines.runtime.admission import (
    DemandExceedsBudgetError,
    ResourceAdmission,
    ResourceDemand,
)

HEAVY = ResourceDemand(cpus=1, memory_mb=3000, storage_mb=100)
LIGHT = ResourceDemand(cpus=0.5, memory_mb=200, storage_mb=100)


def test_heavy_attempts_wait_while_light_ones_proceed():
    async def scenario() -> list[str]:
        admission = ResourceAdmission(
            ResourceBudget(max_active_attempts=4, cpus=4, memory_mb=4096, storage_mb=10_000)
        )
        order: list[str] = []
        release_heavy = asyncio.Event()

        async def attempt(name: str, demand: ResourceDemand, hold: asyncio.Event | None) -> None:
            async with admission.admit(demand, name):
                order.append(f"start {name}")
                if hold is not None:
                    await hold.wait()
                else:
                    await asyncio.sleep(0.01)
                order.append(f"end {name}")

        first = asyncio.create_task(attempt("heavy-1", HEAVY, release_heavy))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(attempt("heavy-2", HEAVY, None))
        await asyncio.sleep(0.01)
        lights = [asyncio.create_task(attempt(f"light-{i}", LIGHT, None)) for i in range(3)]
        await asyncio.gather(*lights)
        assert "start heavy-2" not in order
        release_heavy.set()
        await asyncio.gather(first, second)
        return order

    order = asyncio.run(scenario())
    assert order.index("start heavy-2") > order.index("end heavy-1")
    assert all(order.index(f"end light-{i}") < order.index("end heavy-1") for i in range(3))


def test_active_attempt_limit_holds_even_when_resources_are_free():
    async def scenario() -> int:
        admission = ResourceAdmission(ResourceBudget(max_active_attempts=2))
        peak = 0

        async def attempt() -> None:
            nonlocal peak
            async with admission.admit(ResourceDemand(0.1, 10, 10), "tiny"):
                peak = max(peak, admission.active)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(attempt() for _ in range(8)))
        return peak

    assert asyncio.run(scenario()) == 2


def test_demand_larger_than_the_whole_budget_is_refused_at_once():
    async def scenario() -> None:
        admission = ResourceAdmission(ResourceBudget(memory_mb=1024))
        async with admission.admit(ResourceDemand(1, 4096, 10), "task synth/huge"):
            pass

    with pytest.raises(DemandExceedsBudgetError, match="task synth/huge needs"):
        asyncio.run(scenario())
