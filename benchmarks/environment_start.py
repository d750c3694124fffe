"""Environment start time: Harbor's docker environment against the local bwrap sandbox.

For each task of `datasets/repos/`, one run measures both environments, one after the
other on the same host: the local bwrap sandbox (`BwrapEnvironment`, the baseline, the
`local` provider) and Harbor's docker environment on the platform's Docker daemon
(`OfflineDockerEnvironment`, the `docker` provider). A start is the environment's
`start()` (build the task's image, start it) until a first `exec("true")` returns. Both
build with the platform's isolated image builder; the docker environment then imports
the built root into the daemon (`docker import`, once per image) and Compose starts it:

- cold: an empty image cache (no layers; for Docker a daemon with an empty data root,
  started before the clock starts), holding only the base's root filesystem tarball
  that both builders start from, so neither runs mmdebstrap;
- cached: a second start in the same cache, as every later attempt of the task starts.

Each environment is stopped as a trial stops it (`stop(delete=True)`). Prints seconds
per task and the ratios docker/bwrap, cold and cached, with their medians. Needs root,
bubblewrap, dockerd and Compose v2 (`make setup`), and the package registries the
Dockerfiles install from.

    .venv/bin/python -m benchmarks.environment_start [--tasks a,b] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from harbor.environments.base import BaseEnvironment
from harbor.models.task.config import NetworkPolicy
from harbor.models.task.task import Task
from harbor.models.trial.paths import TrialPaths

from synth_pipelines.config import Settings
from synth_pipelines.runtime.docker_environment import OfflineDockerEnvironment
from synth_pipelines.sandbox.bases import BASE_ENV, BaseImages, resolve_base
from synth_pipelines.sandbox.bwrap import BwrapEnvironment
from synth_pipelines.sandbox.dockerfile import read_dockerfile
from synth_pipelines.sandbox.layers import LayerStore
from synth_pipelines.sandbox.options import HostSettings, ImageCacheOptions
from synth_pipelines.services.dockerd import DockerDaemon

TASKS = Path(__file__).resolve().parent.parent / "datasets" / "repos"
KINDS = {"bwrap": BwrapEnvironment, "docker": OfflineDockerEnvironment}
BASELINE = "bwrap"


def environment(kind: str, task: Path, trial_dir: Path) -> BaseEnvironment:
    """The environment Harbor would build for the task, constructed directly."""
    config = Task(task).config.environment
    paths = TrialPaths(trial_dir)
    paths.mkdir()
    # Each environment is given this host's places and image settings.
    host = Settings()
    on_host = (
        {
            "project_root": host.project_root,
            **ImageCacheOptions.model_validate(host, from_attributes=True).model_dump(),
        }
        if kind == "docker"
        else HostSettings.model_validate(host, from_attributes=True).model_dump()
    )
    return KINDS[kind](
        environment_dir=task / "environment",
        environment_name=task.name,
        session_id=f"{trial_dir.name}__env",
        trial_paths=paths,
        task_env_config=config,
        network_policy=NetworkPolicy(
            network_mode=config.network_mode, allowed_hosts=config.allowed_hosts or []
        ),
        **on_host,
    )


async def base_tarball(task: Path) -> Path:
    """The task's base as a root filesystem tarball, from the configured image cache
    (made there once with mmdebstrap if it is not)."""
    recipe = read_dockerfile(task / "environment" / "Dockerfile", task=task.name, base_env=BASE_ENV)
    base = resolve_base(recipe.base_image, task=task.name)
    images_dir = Settings().images_dir
    images = BaseImages(images_dir, LayerStore(images_dir / "layers"), Settings().debian_mirror)
    return await images.tarball(base)


def use_cache(images_dir: Path) -> None:
    os.environ["SYNTH_IMAGE_CACHE_DIR"] = str(images_dir)


def empty_cache(images_dir: Path, tarball: Path) -> None:
    """An image cache holding nothing but the base tarball (linked, not copied)."""
    bases = images_dir / "bases"
    bases.mkdir(parents=True)
    try:
        os.link(tarball, bases / tarball.name)
    except OSError:
        shutil.copy2(tarball, bases / tarball.name)


async def start_once(kind: str, task: Path, trial_dir: Path) -> float:
    env = environment(kind, task, trial_dir)
    started = time.perf_counter()
    try:
        await env.start(force_build=False)
        result = await env.exec("true")
        elapsed = time.perf_counter() - started
        if result.return_code != 0:
            raise RuntimeError(f"{kind}: exec('true') in {task.name} returned {result}")
        return elapsed
    finally:
        await env.stop(delete=True)


async def measure(task: Path, scratch: Path, tarball: Path) -> dict[str, float]:
    times: dict[str, float] = {}
    for kind in KINDS:
        images_dir = scratch / f"{kind}-{task.name[:12]}"
        empty_cache(images_dir, tarball)
        use_cache(images_dir)
        docker: DockerDaemon | None = (
            DockerDaemon.of(images_dir, Settings().project_root) if kind == "docker" else None
        )
        try:
            if docker is not None:
                started = time.perf_counter()
                await asyncio.to_thread(docker.ensure)
                times["dockerd_start"] = time.perf_counter() - started
            for phase in ("cold", "cached"):
                times[f"{kind}_{phase}"] = await start_once(
                    kind, task, scratch / "trials" / f"{kind}-{phase}-{task.name}"
                )
        finally:
            if docker is not None:
                await asyncio.to_thread(docker.stop)
            shutil.rmtree(images_dir, ignore_errors=True)
    return times


async def measure_all(tasks: list[Path], scratch: Path) -> dict[str, dict[str, float]]:
    # Every tarball first, from the configured cache, before `measure` points the
    # settings at its empty ones.
    tarballs = {task: await base_tarball(task) for task in tasks}
    return {task.name: await measure(task, scratch, tarballs[task]) for task in tasks}


def report(results: dict[str, dict[str, float]]) -> None:
    header = (
        f"{'task':32} {'bwrap cold':>10} {'docker cold':>11} {'ratio':>6}   "
        f"{'bwrap cached':>12} {'docker cached':>13} {'ratio':>6}   {'dockerd':>7}"
    )
    print(header)
    ratios: dict[str, list[float]] = {"cold": [], "cached": []}
    for name, times in results.items():
        row = f"{name:32}"
        for phase in ("cold", "cached"):
            ratio = times[f"docker_{phase}"] / times[f"bwrap_{phase}"]
            ratios[phase].append(ratio)
            width = 10 if phase == "cold" else 12
            row += (
                f" {times[f'bwrap_{phase}']:>{width}.2f} {times[f'docker_{phase}']:>{width + 1}.2f}"
                f" {ratio:>6.2f}  "
            )
        print(f"{row} {times['dockerd_start']:>7.2f}")
    print(
        f"seconds; ratio = docker / bwrap (baseline: {BASELINE}, the local provider); "
        f"median ratio cold {statistics.median(ratios['cold']):.2f}, "
        f"cached {statistics.median(ratios['cached']):.2f}; dockerd: the fresh daemon's "
        "start, before the cold clock"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", help="comma-separated task directory names (default: all)")
    parser.add_argument("--json", action="store_true", help="print the times as JSON")
    args = parser.parse_args()
    names = args.tasks.split(",") if args.tasks else None
    tasks = [
        path
        for path in sorted(TASKS.iterdir())
        if (path / "task.toml").is_file() and (names is None or path.name in names)
    ]
    with tempfile.TemporaryDirectory(prefix="environment-start-") as directory:
        scratch = Path(directory)
        os.environ["SYNTH_DATA_DIR"] = str(scratch / "state")
        results = asyncio.run(measure_all(tasks, scratch))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        report(results)


if __name__ == "__main__":
    main()
