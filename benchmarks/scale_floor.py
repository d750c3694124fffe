"""The bare Harbor trial floor: the same tasks run with Harbor's `Trial` API, no platform.

Harbor's oracle agent (each task's own solution) in the same bubblewrap environment the
platform uses, with the same number of trials at once; nothing is archived or recorded.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from harbor import Trial, TrialConfig
from harbor.models.trial.config import AgentConfig, EnvironmentConfig
from harbor.models.trial.config import TaskConfig as TrialTaskConfig

from benchmarks.process_cpu import own_cpu_sec
from synth_pipelines.runtime.harbor_trials import LOCAL_ENVIRONMENT
from synth_pipelines.sandbox.options import HostSettings


async def _trial(task_dir: Path, trials_dir: Path, host: HostSettings) -> float | None:
    config = TrialConfig(
        task=TrialTaskConfig(path=task_dir),
        trials_dir=trials_dir,
        agent=AgentConfig(name="oracle"),
        environment=EnvironmentConfig(
            import_path=LOCAL_ENVIRONMENT, kwargs=host.model_dump(mode="json")
        ),
    )
    result = await (await Trial.create(config)).run()
    rewards = result.verifier_result.rewards if result.verifier_result else None
    return rewards.get("reward") if rewards else None


async def _floor(
    task_dirs: list[Path], trials_dir: Path, concurrency: int, host: HostSettings
) -> list[float | None]:
    slots = asyncio.Semaphore(concurrency)

    async def one(task_dir: Path) -> float | None:
        async with slots:
            return await _trial(task_dir, trials_dir, host)

    return await asyncio.gather(*(one(task_dir) for task_dir in task_dirs))


@dataclass(frozen=True)
class Throughput:
    attempts: int
    wall_sec: float
    cpu_sec: float

    @property
    def per_hour(self) -> float:
        return self.attempts * 3600 / self.wall_sec

    @property
    def per_cpu_hour(self) -> float:
        return self.attempts * 3600 / self.cpu_sec


def bare_trials(
    task_dirs: list[Path], trials_dir: Path, concurrency: int, host: HostSettings
) -> Throughput:
    """Run the trials; every one must pass, or the floor measured something else."""
    started, cpu = time.perf_counter(), own_cpu_sec()
    rewards = asyncio.run(_floor(task_dirs, trials_dir, concurrency, host))
    elapsed, cpu = time.perf_counter() - started, own_cpu_sec() - cpu
    failed = [task.name for task, reward in zip(task_dirs, rewards, strict=True) if reward != 1.0]
    if failed:
        raise RuntimeError(f"bare Harbor oracle trials did not pass: {failed[:5]}")
    return Throughput(len(task_dirs), elapsed, cpu)
