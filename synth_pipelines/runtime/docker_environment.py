"""Harbor's own docker environment, on the platform's Docker daemon, pulling nothing.

A plan's `environment.provider = "docker"` runs its tasks with Harbor's
`DockerEnvironment` itself: `up` starts the task's image, and every exec and transfer
is Harbor's. This subclass changes only what an offline host, and a Dockerfile that is
the task author's code, need:

- every `docker` and `docker compose` call goes to the platform's daemon
  (`services/dockerd.py`, in the image cache its kwargs name), started on first use,
  with the client configuration that holds the Compose plugin;
- the task's Dockerfile is built by the platform's image builder (`sandbox/image_build.py`),
  never by the daemon: each `RUN` step runs like an attempt, in its own network
  namespace whose only way out is the registry proxy, within the task's memory, cpu,
  pids and storage limits and under the seccomp filter; a breach is a task error
  naming the limit. The built root is imported into the daemon once per image key
  (`sandbox/image_export.py`, `docker import` with the image's ENV, WORKDIR and USER)
  and Harbor starts it as the task's prebuilt image. A Compose file of the task that
  asks the daemon to build is refused: the daemon's builds run on the host's network,
  outside the task's limits;
- a prebuilt `docker_image` that the daemon lacks is made from the base the local image
  builder makes from Debian's archive (`sandbox/bases.py`) and imported under exactly
  that tag, so nothing is pulled; what no base covers is refused;
- `no-network` is enforced as Harbor's own Compose file for it does
  (`network_mode: none` on the main service: loopback only), not with Harbor's
  egress-control sidecar, whose image and kernel probe come from Docker Hub;
- what only that sidecar can enforce (an allowlist, a network mode that changes between
  phases, no-network for a task with its own compose services) is refused before
  anything starts, naming the task and why.

A `public` task's containers share a compose network but have no route out: the daemon
has no NAT (see `services/dockerd.py`), as the bwrap sandbox has no network either.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, override

import yaml
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.definition import should_use_prebuilt_docker_image
from harbor.environments.docker import COMPOSE_NO_NETWORK_PATH
from harbor.environments.docker.docker import DockerEnvironment
from harbor.environments.docker.runtime import DOCKER_RUNTIME, ContainerRuntime
from harbor.models.task.config import NetworkMode, NetworkPolicy

from synth_pipelines.sandbox import errors
from synth_pipelines.sandbox.bases import BASE_ENV, BaseImage, BaseImages, available, resolve_base
from synth_pipelines.sandbox.build_bounds import BuildLimits
from synth_pipelines.sandbox.dockerfile import read_dockerfile
from synth_pipelines.sandbox.image_build import Image, ImageBuilder
from synth_pipelines.sandbox.image_export import write_root_tar
from synth_pipelines.sandbox.image_root import image_recipe
from synth_pipelines.sandbox.layers import LayerStore
from synth_pipelines.sandbox.limits import ResourceLimits
from synth_pipelines.sandbox.options import DEFAULT_PIDS_MAX, ImageCacheOptions
from synth_pipelines.services.dockerd import DockerDaemon

IMPORT_PATH = "synth_pipelines.runtime.docker_environment:OfflineDockerEnvironment"
# Set on every base this environment imports: the key of the recipe it was made with, so
# an image of a stale recipe is imported again and one the platform did not make is kept.
BASE_LABEL = "synth.base"
# Set on every built image this environment imports: the digest of its layers and of what
# a container of it runs with (`imported_digest`).
IMAGE_LABEL = "synth.image"
BUILT_REPOSITORY = "synth-built"
_SIDECAR = (
    "which Harbor's docker environment can only enforce with its egress-control sidecar, "
    "whose images come from Docker Hub, unreachable offline"
)


class UnsupportedTaskError(errors.UnsupportedTaskError):
    """A task this environment cannot run offline. The bwrap sandbox's type name on
    purpose: attempts are classified by it (a task error, not the platform's)."""

    def __init__(self, task: str, problem: str) -> None:
        ValueError.__init__(
            self, f"Task {task!r} cannot run in Harbor's docker environment here: {problem}"
        )
        self.task = task
        self.problem = problem


def imported_digest(image: Image) -> str:
    """What names a built image in the daemon: its top layer's key (every step and input
    beneath it) and the ENV, WORKDIR and USER it is imported with, which no layer holds."""
    described = {
        "layer": image.key,
        "env": sorted(image.env.items()),
        "workdir": None if image.workdir is None else str(image.workdir),
        "user": image.user,
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def built_tag(image: Image) -> str:
    """The daemon's name for a built image: any change to a step, an input or its
    configuration names a new image, and an unchanged one is imported once."""
    return f"{BUILT_REPOSITORY}:{imported_digest(image)[:32]}"


def import_changes(image: Image) -> list[str]:
    """The Dockerfile instructions `docker import` applies to a built root: what a
    container of the image runs with, and the label that names its key."""

    def quoted(value: str) -> str:
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
        return f'"{escaped}"'

    changes = [f"ENV {name}={quoted(value)}" for name, value in image.env.items()]
    if image.workdir is not None:
        changes.append(f"WORKDIR {image.workdir}")
    if image.user is not None:
        changes.append(f"USER {image.user}")
    changes.append(f"LABEL {IMAGE_LABEL}={imported_digest(image)}")
    return changes


def compose_builds(files: Sequence[Path]) -> list[str]:
    """The services of these Compose files that ask the daemon to build an image."""
    found = []
    for path in files:
        if not path.is_file():
            continue
        document = yaml.safe_load(path.read_text()) or {}
        services = document.get("services") if isinstance(document, dict) else None
        for name, service in (services or {}).items():
            if isinstance(service, dict) and "build" in service:
                found.append(f"{name} ({path.name})")
    return found


class OfflineDockerEnvironment(DockerEnvironment):
    """Harbor's `DockerEnvironment` on the platform's daemon, with nothing pulled and
    nothing built by it: the daemon of the image cache at `images_dir` (with the Compose
    plugin of `project_root`), whose images the platform's builder makes."""

    daemon: ClassVar[DockerDaemon]

    def __new__(
        cls, *args: Any, images_dir: Path, project_root: Path, **kwargs: Any
    ) -> OfflineDockerEnvironment:
        # Harbor asks the class, not the instance, for its container runtime
        # (`type(self).runtime()`): an environment is made of the class of its daemon.
        return super().__new__(_on_daemon(DockerDaemon.of(Path(images_dir), Path(project_root))))

    def __init__(
        self,
        environment_dir: Path,
        environment_name: str,
        *,
        images_dir: Path,
        project_root: Path,
        debian_mirror: str,
        image_step_timeout_sec: float,
        image_cache_mb: int,
        image_registry_hosts: Sequence[str],
        network_policy: NetworkPolicy | None = None,
        phase_network_policies: Sequence[NetworkPolicy] | None = None,
        extra_docker_compose: Sequence[Path | str] | None = None,
        **kwargs: Any,
    ) -> None:
        self._cache = ImageCacheOptions(
            images_dir=images_dir,
            debian_mirror=debian_mirror,
            image_step_timeout_sec=image_step_timeout_sec,
            image_cache_mb=image_cache_mb,
            image_registry_hosts=tuple(image_registry_hosts),
        )
        images_dir = self._cache.images_dir
        self._images = BaseImages(images_dir, LayerStore(images_dir / "layers"), debian_mirror)
        policies = [
            network_policy or NetworkPolicy(network_mode=NetworkMode.PUBLIC),
            *(phase_network_policies or ()),
        ]
        modes = sorted({policy.network_mode.value for policy in policies})
        if NetworkMode.ALLOWLIST.value in modes:
            raise UnsupportedTaskError(
                environment_name, f"it asks for network mode allowlist, {_SIDECAR}"
            )
        if len(modes) > 1:
            raise UnsupportedTaskError(
                environment_name,
                f"its network mode changes between phases ({', '.join(modes)}), "
                + _SIDECAR.replace("enforce", "switch"),
            )
        self._no_network = modes == [NetworkMode.NO_NETWORK.value]
        compose_files = [
            Path(environment_dir) / "docker-compose.yaml",
            *(Path(extra) for extra in extra_docker_compose or ()),
        ]
        own_services = any(path.is_file() for path in compose_files)
        if self._no_network and own_services:
            raise UnsupportedTaskError(
                environment_name,
                "it asks for network mode no-network and has compose services of its own; "
                "offline, no-network takes the main container off every network, which "
                "would cut it off from them too, and the egress-control sidecar that keeps "
                "them joined needs images from Docker Hub, unreachable offline",
            )
        built_by_daemon = compose_builds(compose_files)
        if built_by_daemon:
            raise UnsupportedTaskError(
                environment_name,
                f"its Compose services {', '.join(built_by_daemon)} are built by the Docker "
                "daemon, whose build steps run on the host's network and outside the "
                "task's limits; only the task's environment/Dockerfile is built here, by "
                "the platform's isolated builder",
            )
        super().__init__(
            environment_dir=environment_dir,
            environment_name=environment_name,
            network_policy=network_policy,
            phase_network_policies=phase_network_policies,
            extra_docker_compose=extra_docker_compose,
            **kwargs,
        )

    @classmethod
    @override
    def runtime(cls) -> ContainerRuntime:
        # Flags rather than DOCKER_HOST/DOCKER_CONFIG in this process's environment: they
        # win over whatever the caller's environment points at, and change nothing else.
        docker = cls.daemon
        client = ("docker", "--host", docker.host, "--config", str(docker.client_config))
        return replace(DOCKER_RUNTIME, engine=client, compose=(*client, "compose"))

    @staticmethod
    @override
    def _requires_egress_control(
        *,
        startup_network_policy: NetworkPolicy,
        phase_network_policies: Sequence[NetworkPolicy],
    ) -> bool:
        # Never the sidecar: what needs it is refused in __init__, and asking for it would
        # `docker run` a kernel probe pinned by digest on Docker Hub.
        return False

    @property
    @override
    def capabilities(self) -> EnvironmentCapabilities:
        # no-network is enforced with `network_mode: none` instead of the sidecar.
        return super().capabilities.model_copy(update={"disable_internet": True})

    @classmethod
    @override
    def preflight(cls, kwargs: dict[str, Any] | None = None) -> None:
        named = kwargs or {}
        docker = DockerDaemon.of(Path(named["images_dir"]), Path(named["project_root"]))
        bound = _on_daemon(docker)
        bound.daemon.ensure()
        super(OfflineDockerEnvironment, bound).preflight(kwargs)

    @property
    @override
    def _docker_compose_paths(self) -> list[Path]:
        paths = super()._docker_compose_paths
        if self._no_network:
            paths.append(COMPOSE_NO_NETWORK_PATH)
        return paths

    @override
    async def start(self, force_build: bool) -> None:
        # Harbor's installed agents import LiteLLM, which otherwise fetches its model cost
        # map from GitHub on import.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        docker_image = self.task_env_config.docker_image
        prebuilt = should_use_prebuilt_docker_image(
            self.environment_dir, docker_image=docker_image, force_build=force_build
        )
        # Built before the daemon is asked for anything: a refused Dockerfile or a step
        # past a limit ends the attempt without touching it.
        image = None if prebuilt or not self._dockerfile_path.exists() else await self._build()
        await asyncio.to_thread(self.daemon.ensure)
        if self.network_policy.network_mode == NetworkMode.PUBLIC:
            self.logger.info(
                "Task %s asks for public network access; containers of the platform's "
                "Docker daemon have no route out, only the compose network between them.",
                self.environment_name,
            )
        if image is not None:
            # Harbor then starts it as the task's prebuilt image: Compose builds nothing.
            tag = await self._import_built(image)
            self.task_env_config = self.task_env_config.model_copy(update={"docker_image": tag})
            self._env_vars.prebuilt_image_name = tag
            force_build = False
        elif prebuilt and docker_image:
            await self._provide_base(docker_image)
        await super().start(force_build)

    async def _build(self) -> Image:
        """The task's image, built (or found) by the platform's builder within the
        limits an attempt of the task gets."""
        task, dockerfile = self.environment_name, self._dockerfile_path
        try:
            first = read_dockerfile(dockerfile, task=task, base_env=BASE_ENV)
            recipe = image_recipe(first, dockerfile, self.environment_dir, task=task)
        except errors.UnsupportedTaskError as refused:
            raise UnsupportedTaskError(task, refused.problem) from None
        limits = BuildLimits(
            ResourceLimits(
                memory_mb=self._effective_memory_mb,
                cpus=self._effective_cpus,
                pids=DEFAULT_PIDS_MAX,
            ),
            self._effective_storage_mb,
        )
        builder = ImageBuilder.configured(
            self._cache, progress=lambda line: self.logger.debug("image build: %s", line)
        )
        image = await builder.build(recipe, self.environment_dir, task=task, limits=limits)
        if builder.built:
            self.logger.info(
                "Built %d layer(s) of the image of %s (%d cached)",
                builder.built,
                task,
                builder.cached,
            )
        return image

    async def _import_built(self, image: Image) -> str:
        """The daemon's tag of `image`, its root imported first when the daemon lacks it."""
        tag, digest = built_tag(image), imported_digest(image)
        labels = await self._image_labels(tag)
        if labels is not None and labels.get(IMAGE_LABEL) == digest:
            return tag
        store = self._images.store
        async with store.exclusive(f"docker-{digest[:16]}"):
            labels = await self._image_labels(tag)
            if labels is None or labels.get(IMAGE_LABEL) != digest:
                self.logger.debug("importing the image of %s as %s", self.environment_name, tag)
                await asyncio.to_thread(self._import_root, image, store, tag)
        return tag

    def _import_root(self, image: Image, store: LayerStore, tag: str) -> None:
        """Stream the image's root into `docker import`. Blocking."""
        command = type(self)._engine_cmd(
            "import", *(f"--change={change}" for change in import_changes(image)), "-", tag
        )
        store.scratch.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=store.scratch) as stderr:
            process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr
            )
            assert process.stdin is not None
            try:
                with process.stdin:
                    write_root_tar(image, store, process.stdin)
            except BrokenPipeError:
                pass  # docker import exited early: its status and message say why
            finally:
                returncode = process.wait()
            if returncode != 0:
                stderr.seek(0)
                raise RuntimeError(
                    f"docker import of the image of {self.environment_name} failed "
                    f"(exit {returncode}): {stderr.read().decode(errors='replace').strip()}"
                )

    async def _provide_base(self, reference: str) -> None:
        """Make sure the daemon has `reference`: as it is when the platform did not import
        it, else imported from the local builder's base of the current recipe."""
        labels = await self._image_labels(reference)
        if labels is not None and BASE_LABEL not in labels:
            return
        base = self._resolve(reference)
        if labels is not None and labels[BASE_LABEL] == base.key:
            return
        images = self._images
        async with images.store.exclusive(f"docker-{base.key[:16]}"):
            labels = await self._image_labels(reference)
            if labels is not None and labels.get(BASE_LABEL) == base.key:
                return
            tarball = await images.tarball(
                base, lambda line: self.logger.debug("base image: %s", line)
            )
            changes = [f"ENV {name}={value}" for name, value in BASE_ENV.items()]
            changes.append(f"LABEL {BASE_LABEL}={base.key}")
            self.logger.debug("importing %s as %s", tarball, reference)
            await self._docker(
                "import", *(f"--change={change}" for change in changes), str(tarball), reference
            )

    def _resolve(self, reference: str) -> BaseImage:
        try:
            return resolve_base(reference, task=self.environment_name)
        except errors.UnsupportedTaskError:
            raise UnsupportedTaskError(
                self.environment_name,
                f"image {reference} is not in the local Docker daemon and no registry can "
                f"be reached to pull it; the bases made here from Debian's archive are: "
                f"{available()}",
            ) from None

    async def _image_labels(self, reference: str) -> dict[str, str] | None:
        """The image's labels, or None when the daemon has no image of that name."""
        found = await self._docker(
            "image", "inspect", "--format", "{{json .Config.Labels}}", reference, check=False
        )
        if found is None:
            return None
        return json.loads(found) or {}

    async def _docker(self, *args: str, check: bool = True) -> str | None:
        process = await asyncio.create_subprocess_exec(
            *type(self)._engine_cmd(*args),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await process.communicate()
        if process.returncode == 0:
            return stdout.decode()
        if check:
            raise RuntimeError(
                f"docker {' '.join(args[:1])} failed for {self.environment_name} "
                f"(exit {process.returncode}): {stderr.decode(errors='replace').strip()}"
            )
        return None


@functools.cache
def _on_daemon(docker: DockerDaemon) -> type[OfflineDockerEnvironment]:
    """The environment class of `docker`, made once per daemon."""
    name = OfflineDockerEnvironment.__name__
    return type(name, (OfflineDockerEnvironment,), {"daemon": docker, "__module__": __name__})
