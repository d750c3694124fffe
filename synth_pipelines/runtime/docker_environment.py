"""Harbor's own docker environment, on the platform's Docker daemon, pulling nothing.

A plan's `environment.provider = "docker"` runs its tasks with Harbor's
`DockerEnvironment` itself: Compose builds the task's image, `up` starts it, and every
exec and transfer is Harbor's. This subclass changes only what an offline host needs:

- every `docker` and `docker compose` call goes to the platform's daemon
  (`services/dockerd.py`, in the image cache its kwargs name), started on first use,
  with the client configuration that holds the Compose plugin;
- each image a build starts FROM (or a prebuilt `docker_image`) that the daemon lacks is
  made from the base the local image builder makes from Debian's archive
  (`sandbox/bases.py`) and imported under exactly that tag, so the build finds it
  locally and pulls nothing; what no base covers is refused;
- build steps run on the host's network (the daemon has no bridge of its own);
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
import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, override

from dockerfile_parse import DockerfileParser
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.definition import should_use_prebuilt_docker_image
from harbor.environments.docker import COMPOSE_NO_NETWORK_PATH
from harbor.environments.docker.docker import DockerEnvironment
from harbor.environments.docker.runtime import DOCKER_RUNTIME, ContainerRuntime
from harbor.models.task.config import NetworkMode, NetworkPolicy

from synth_pipelines.sandbox import errors
from synth_pipelines.sandbox.bases import BASE_ENV, BaseImage, BaseImages, available, resolve_base
from synth_pipelines.sandbox.layers import LayerStore
from synth_pipelines.services.dockerd import DockerDaemon

IMPORT_PATH = "synth_pipelines.runtime.docker_environment:OfflineDockerEnvironment"
# Set on every base this environment imports: the key of the recipe it was made with, so
# an image of a stale recipe is imported again and one the platform did not make is kept.
BASE_LABEL = "synth.base"
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


def base_references(dockerfile: Path) -> list[str]:
    """The images a Dockerfile's stages start FROM: neither `scratch` nor an earlier stage."""
    parsed = DockerfileParser(path=str(dockerfile))
    stages: set[str] = set()
    found: list[str] = []
    instructions = [entry for entry in parsed.structure if entry["instruction"] == "FROM"]
    for instruction, image in zip(instructions, parsed.parent_images, strict=True):
        if image.lower() not in stages and image != "scratch" and image not in found:
            found.append(image)
        words = instruction["value"].split()
        if len(words) >= 3 and words[-2].lower() == "as":
            stages.add(words[-1].lower())
    return found


def build_network_override(docker: DockerDaemon) -> Path:
    """A Compose override running the main image's build steps on the host's network:
    the daemon has no default bridge, and no NAT to give one a route out."""
    path = docker.root / "compose" / "build-on-host-network.json"
    content = json.dumps({"services": {"main": {"build": {"network": "host"}}}}, indent=2)
    if not path.exists() or path.read_text() != content:
        path.parent.mkdir(parents=True, exist_ok=True)
        pending = path.with_suffix(f".{os.getpid()}.partial")
        pending.write_text(content)
        pending.replace(path)
    return path


class OfflineDockerEnvironment(DockerEnvironment):
    """Harbor's `DockerEnvironment` on the platform's daemon, with nothing pulled: the one
    of the image cache at `images_dir` (with the Compose plugin of `project_root`), whose
    bases are made from `debian_mirror`."""

    daemon: ClassVar[DockerDaemon]

    def __new__(
        cls, *args: Any, images_dir: Path, project_root: Path, **kwargs: Any
    ) -> OfflineDockerEnvironment:
        # Harbor asks the class, not the instance, for its container runtime
        # (`type(self).runtime()`): an environment is made of the class of its daemon.
        return super().__new__(_on_daemon(DockerDaemon.of(images_dir, project_root)))

    def __init__(
        self,
        environment_dir: Path,
        environment_name: str,
        *,
        images_dir: Path,
        project_root: Path,
        debian_mirror: str,
        network_policy: NetworkPolicy | None = None,
        phase_network_policies: Sequence[NetworkPolicy] | None = None,
        extra_docker_compose: Sequence[Path | str] | None = None,
        **kwargs: Any,
    ) -> None:
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
        own_services = (Path(environment_dir) / "docker-compose.yaml").exists() or bool(
            extra_docker_compose
        )
        if self._no_network and own_services:
            raise UnsupportedTaskError(
                environment_name,
                "it asks for network mode no-network and has compose services of its own; "
                "offline, no-network takes the main container off every network, which "
                "would cut it off from them too, and the egress-control sidecar that keeps "
                "them joined needs images from Docker Hub, unreachable offline",
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
        bound = _on_daemon(DockerDaemon.of(named["images_dir"], named["project_root"]))
        bound.daemon.ensure()
        super(OfflineDockerEnvironment, bound).preflight(kwargs)

    @property
    @override
    def _docker_compose_paths(self) -> list[Path]:
        paths = super()._docker_compose_paths
        if not self._use_prebuilt:
            at = paths.index(self._DOCKER_COMPOSE_BUILD_PATH) + 1
            paths.insert(at, build_network_override(self.daemon))
        if self._no_network:
            paths.append(COMPOSE_NO_NETWORK_PATH)
        return paths

    @override
    async def start(self, force_build: bool) -> None:
        # Harbor's installed agents import LiteLLM, which otherwise fetches its model cost
        # map from GitHub on import.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        await asyncio.to_thread(self.daemon.ensure)
        if self.network_policy.network_mode == NetworkMode.PUBLIC:
            self.logger.info(
                "Task %s asks for public network access; containers of the platform's "
                "Docker daemon have no route out, only the compose network between them.",
                self.environment_name,
            )
        for reference in self._base_references(force_build):
            await self._provide_base(reference)
        await super().start(force_build)

    def _base_references(self, force_build: bool) -> list[str]:
        docker_image = self.task_env_config.docker_image
        if docker_image and should_use_prebuilt_docker_image(
            self.environment_dir, docker_image=docker_image, force_build=force_build
        ):
            return [docker_image]
        if self._dockerfile_path.exists():
            return base_references(self._dockerfile_path)
        return []

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
