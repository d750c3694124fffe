"""`BwrapEnvironment`: Harbor's container-free local environment, built on bubblewrap.

Harbor loads it by import path, for agent and separate-verifier environments alike:
`EnvironmentConfig(import_path="synth_pipelines.sandbox.bwrap:BwrapEnvironment")`,
or `--env synth_pipelines.sandbox.bwrap:BwrapEnvironment` on Harbor's CLI. What it
isolates and how is written up in docs/sandbox.md.

This module adapts Harbor's interface to the sandbox's mechanisms, each in a module of
its own: the root the task's Dockerfile chooses at construction (`root.py`), the
namespaces and the init (`namespace.py`), limits (`limits.py`), storage
(`storage.py`), leases (`leases.py`), routes (`route.py`) and file transfers
(`transfers.py`).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import secrets
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import (
    EnvironmentCapabilities,
    EnvironmentResourceCapabilities,
)
from harbor.environments.definition import (
    COMPOSE_FILE_NAME,
    DOCKERFILE_NAME,
    effective_exec_cwd,
    require_agent_environment_definition,
)
from harbor.models.task.config import NetworkMode
from harbor.models.trial.config import ResourceMode
from harbor.models.trial.paths import EnvironmentPaths

from synth_pipelines.sandbox.attach import attach
from synth_pipelines.sandbox.build_bounds import BuildLimits
from synth_pipelines.sandbox.dockerfile import DockerfileRecipe, read_dockerfile
from synth_pipelines.sandbox.errors import (
    SandboxCleanupError,
    SandboxNotRunningError,
    SandboxPathError,
    SandboxStorageError,
    UnsupportedTaskError,
)
from synth_pipelines.sandbox.execution import run_in_leaf
from synth_pipelines.sandbox.host_root import HostRoot, check_host_recipe
from synth_pipelines.sandbox.identity import FILE_ROOT, Identity
from synth_pipelines.sandbox.image_build import Image
from synth_pipelines.sandbox.image_root import ImageRoot, image_recipe
from synth_pipelines.sandbox.leases import SandboxLease, reclaim_orphans_once
from synth_pipelines.sandbox.limits import (
    INIT_LEAF,
    ResourceLimits,
    SandboxCgroup,
    detect_hierarchy,
)
from synth_pipelines.sandbox.namespace import SYSTEM_PATH, TERMINATE_DEADLINE_SEC, SandboxInit
from synth_pipelines.sandbox.options import BwrapOptions, host_binds
from synth_pipelines.sandbox.quarantine import quarantine
from synth_pipelines.sandbox.root import RootLayout, SandboxRoot
from synth_pipelines.sandbox.route import RouteTarget, SandboxRoute
from synth_pipelines.sandbox.seccomp import filter_program
from synth_pipelines.sandbox.storage import (
    IMAGE_NAME,
    SizedFilesystem,
    can_mount_sized_filesystem,
)
from synth_pipelines.sandbox.transfers import Transfers
from synth_pipelines.sandbox.verification_reset import scratch_reset_script, verifier_home_dir


class BwrapEnvironment(BaseEnvironment):
    """A Harbor environment in bubblewrap namespaces on this host; see docs/sandbox.md."""

    options_model = BwrapOptions
    options: BwrapOptions
    sandbox_dir: Path
    _root: SandboxRoot

    def __init__(self, *args: Any, **kwargs: Any):
        self._init: SandboxInit | None = None
        self._cgroup: SandboxCgroup | None = None
        self._routes: list[SandboxRoute] = []
        self._storage: SizedFilesystem | None = None
        self._lease: SandboxLease | None = None
        self._exec_numbers = itertools.count(1)
        self._verifying = False
        self._verifications = 0
        self._verifier_homes: dict[int, str] = {}
        self._hierarchy = detect_hierarchy()
        super().__init__(*args, **kwargs)

    @staticmethod
    def type() -> str:
        return "bwrap"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True, mounted=True)

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        if detect_hierarchy() is None:
            return EnvironmentResourceCapabilities()
        return EnvironmentResourceCapabilities(
            cpu_limit=True, memory_limit=True, fractional_cpus=True
        )

    @property
    def recipe(self) -> DockerfileRecipe:
        return self._root.recipe

    @property
    def image(self) -> Image | None:
        """The image the sandbox runs on, once started on one."""
        return self._root.image

    @property
    def limits(self) -> ResourceLimits:
        return ResourceLimits(
            memory_mb=self._resource_limit_value("memory", auto_mode=ResourceMode.LIMIT),
            cpus=self._resource_limit_value("cpu", auto_mode=ResourceMode.LIMIT),
            pids=self.options.pids_max,
        )

    def _validate_definition(self) -> None:
        """Harbor calls this from its constructor: the task's Dockerfile is read, and
        decides the sandbox's root once (an image's when it has RUN or USER steps)."""
        task = self.environment_name
        dockerfile = self.environment_dir / DOCKERFILE_NAME
        if (self.environment_dir / COMPOSE_FILE_NAME).exists():
            raise UnsupportedTaskError(task, f"{COMPOSE_FILE_NAME} needs a container engine")
        if not dockerfile.exists():
            image = self.task_env_config.docker_image
            if image:
                raise UnsupportedTaskError(
                    task,
                    f"the prebuilt image {image!r} cannot be pulled; the local sandbox "
                    f"only reproduces {self.environment_dir.name}/{DOCKERFILE_NAME}",
                )
            require_agent_environment_definition(self.environment_dir)
        recipe = read_dockerfile(dockerfile, task=task, base_env={"PATH": SYSTEM_PATH})
        name = f"{re.sub(r'[^A-Za-z0-9._-]', '_', self.session_id)}-{secrets.token_hex(4)}"
        self.sandbox_dir = self.options.sandboxes_dir / name
        self._transfers = Transfers(
            self._run_inside, self.sandbox_dir, self.session_id, self.logger
        )
        paths = EnvironmentPaths.for_os(self.os)
        bundled_tests = not self._enable_environment_dir_upload
        if recipe.needs_build:
            self._root = ImageRoot(
                image_recipe(recipe, dockerfile, self.environment_dir, task=task),
                self.environment_dir,
                task=task,
                sandbox_dir=self.sandbox_dir,
                binds=host_binds(self.options, self._host_mounts, task=task),
                paths=paths,
                bundled_tests=bundled_tests,
                cache=self.options,
                limits=BuildLimits(self.limits, self._effective_storage_mb),
                run=self._run_inside,
                transfers=self._transfers,
                logger=self.logger,
            )
        else:
            workdir = self.task_env_config.workdir
            check_host_recipe(recipe, self.environment_dir, task=task, workdir=workdir)
            self._root = HostRoot(
                recipe,
                self.environment_dir,
                sandbox_dir=self.sandbox_dir,
                binds=host_binds(self.options, self._host_mounts, task=task),
                paths=paths,
                workdir=workdir,
                bundled_tests=bundled_tests,
            )

    async def start(self, force_build: bool) -> None:
        self._log_unenforced_requests()
        await asyncio.to_thread(reclaim_orphans_once, self.sandbox_dir.parent)
        await self._root.prepare()
        try:
            layout = await asyncio.to_thread(self._lay_down)
            try:
                procs_files = await asyncio.to_thread(self._create_cgroup)
                self._init = await SandboxInit.launch(
                    layout.arguments, procs_files, filter_program(), pass_fds=layout.pass_fds
                )
            finally:
                layout.close()
            await asyncio.to_thread(
                attach, self._init.pidfd, self._init.root_fd, self._root.attachments()
            )
            await self.ensure_dirs(self._mount_targets(writable_only=True))
            await self._root.finish_start()
        except BaseException:
            await asyncio.shield(self.stop(delete=True))
            raise

    def _lay_down(self) -> RootLayout:
        """Take the sandbox's lease and storage, then lay its root down on them."""
        self._lease = SandboxLease.take(self.sandbox_dir)
        storage_mb = self._effective_storage_mb
        if storage_mb and can_mount_sized_filesystem():
            self._storage = SizedFilesystem(
                self._root.filesystem.writable_root, self.sandbox_dir / IMAGE_NAME, storage_mb
            )
            self._storage.mount()
        return self._root.lay_down()

    def _create_cgroup(self) -> list[Path]:
        if self._hierarchy is None:
            return []
        self._cgroup = SandboxCgroup(self._hierarchy, self.sandbox_dir.name)
        self._cgroup.create(self.limits)
        return self._cgroup.new_leaf(INIT_LEAF)

    def _log_unenforced_requests(self) -> None:
        if self.network_policy.network_mode == NetworkMode.PUBLIC:
            self.logger.info(
                "Task %s asks for public network access; the bwrap sandbox has no "
                "network, only its own loopback.",
                self.environment_name,
            )
        limits = self.limits
        if self._hierarchy is None and (limits.memory_mb or limits.cpus):
            self.logger.warning(
                "No writable cgroup hierarchy on this host: memory_mb=%s and cpus=%s "
                "are not enforced for %s.",
                limits.memory_mb,
                limits.cpus,
                self.environment_name,
            )
        if self._effective_storage_mb and not can_mount_sized_filesystem():
            self.logger.warning(
                "This process cannot mount a filesystem image (it needs CAP_SYS_ADMIN, "
                "loop devices and mkfs.ext4): storage_mb=%s is not enforced for %s.",
                self._effective_storage_mb,
                self.environment_name,
            )

    async def open_route(self, inside_port: int, target: RouteTarget) -> str:
        """Make `target` on the host (a Unix socket, or a host and port) reachable from
        inside the sandbox at 127.0.0.1:`inside_port`, and nothing else; returns the URL
        to use inside."""
        init = self._running_init()
        route = SandboxRoute(init.pidfd, inside_port, target)
        await route.open()
        self._routes.append(route)
        return route.url

    async def stop(self, delete: bool) -> None:
        """Kill everything and remove the sandbox's host state. Nothing inside can make
        this fail: each step runs whatever the others did, and what still cannot be
        removed is quarantined (`quarantine.py`) and reported as a warning."""
        for route in self._routes:
            await route.close()
        self._routes.clear()
        problems: list[str] = []
        cgroup, self._cgroup = self._cgroup, None
        if cgroup is not None:
            problems += await _attempted(cgroup.kill_commands)
        if self._init is not None:
            if not await self._init.terminate():
                problems.append(
                    f"the sandbox's pid 1 did not end within {TERMINATE_DEADLINE_SEC} s of "
                    "SIGKILL: a process in it is stuck in the kernel"
                )
            self._init = None
        if cgroup is not None and not problems:
            problems += await _attempted(cgroup.remove)
        problems += await _attempted(self._root.tear_down)
        if self._storage is not None:
            storage, self._storage = self._storage, None
            release = storage.unmount if delete else storage.unmount_keeping_files
            problems += await _attempted(release)
        if delete:
            problems += await _attempted(self._root.filesystem.remove)
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        if problems:
            record = await asyncio.to_thread(quarantine, self.sandbox_dir, cgroup, problems)
            self.logger.warning(
                "Sandbox %s could not be removed completely and is quarantined (%s): %s",
                self.session_id,
                record,
                "; ".join(problems),
            )

    async def end_agent_phase(self) -> None:
        """Hand the environment from the agent to a verifier that runs in it (Harbor's
        shared mode; `verification.py` calls this and says what is reset and why):
        every process the agent left is killed; `/logs/verifier`, `/tests` and the
        scratch directories are emptied by root over the sandbox's files, which no mode
        the agent set can stop; and from now on every command's HOME is a fresh one that
        holds the image's home, not the agent's (`_verifier_home`)."""
        init = self._running_init()
        await asyncio.to_thread(init.kill_all_but_init)
        paths = EnvironmentPaths.for_os(self.os)
        # Bundled tests were laid in /tests at the start, and Harbor will not upload
        # them again; otherwise Harbor uploads the tests into an emptied /tests.
        emptied_dirs = [paths.verifier_dir]
        if self._enable_environment_dir_upload:
            emptied_dirs.append(paths.tests_dir)
        mounted = [str(bind.target) for bind in self._root.filesystem.binds]
        command = (
            f"{self._empty_dirs_command(emptied_dirs)} || exit 1\n{scratch_reset_script(mounted)}"
        )
        emptied = await self._as_file_root(init, command)
        if emptied.return_code != 0:
            raise SandboxPathError(
                f"could not reset sandbox {self.session_id} for its verifier "
                f"(exit {emptied.return_code}): {emptied.stderr or emptied.stdout}"
            )
        self._verifications += 1
        self._verifier_homes = {}
        self._verifying = True

    def begin_agent_phase(self) -> None:
        """The agent's turn again (the next step of a multi-step task): its commands run
        with their own HOME once more."""
        self._verifying = False

    async def _as_file_root(self, init: SandboxInit, command: str) -> ExecResult:
        """One of the sandbox's own resets, as root over its files."""
        return await run_in_leaf(
            init,
            self._cgroup,
            f"exec-{next(self._exec_numbers):06d}",
            command,
            identity=FILE_ROOT,
            cwd="/",
            env={"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"},
            timeout_sec=None,
            on_output=None,
            stdin_fd=None,
            stdout_fd=None,
            sandbox=self.session_id,
            memory_mb=self.limits.memory_mb,
        )

    async def _verifier_home(self, init: SandboxInit, identity: Identity) -> str:
        """HOME for a shared verifier's commands as `identity`: a fresh directory with
        the image's own home in it (copy-on-write), not the home the agent used."""
        if identity.uid in self._verifier_homes:
            return self._verifier_homes[identity.uid]
        home = verifier_home_dir(self._verifications, identity.uid)
        made = await self._as_file_root(
            init,
            f"rm -rf -- {home} && mkdir -m 0700 {home} && "
            f"chown {identity.uid}:{identity.gid} {home}",
        )
        if made.return_code != 0:
            raise SandboxPathError(
                f"could not make the verifier's home {home} in sandbox {self.session_id} "
                f"(exit {made.return_code}): {made.stderr or made.stdout}"
            )
        image_home = await asyncio.to_thread(self._root.verifier_home, identity.home, identity)
        if image_home is not None:
            await asyncio.to_thread(
                attach, init.pidfd, init.root_fd, [(image_home, PurePosixPath(home), False)]
            )
        self._verifier_homes[identity.uid] = home
        return home

    @property
    def running(self) -> bool:
        return self._init is not None and self._init.running

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        return await self._run_inside(command, cwd=cwd, env=env, timeout_sec=timeout_sec, user=user)

    async def _run_inside(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
        stdin_fd: int | None = None,
        stdout_fd: int | None = None,
    ) -> ExecResult:
        """`exec`, optionally with stdin and stdout connected to host files."""
        init = self._running_init()
        identity = await self._root.identity(self._resolve_user(user))
        workdir = effective_exec_cwd(
            cwd,
            self.task_env_config.workdir,
            str(self.recipe.workdir) if self.recipe.workdir else None,
        )
        variables = {
            "HOME": identity.home,
            "LANG": "C.UTF-8",
            **self.recipe.env,
            **(self._merge_env(env) or {}),
        }
        if self._verifying:
            variables["HOME"] = await self._verifier_home(init, identity)
        return await run_in_leaf(
            init,
            self._cgroup,
            f"exec-{next(self._exec_numbers):06d}",
            command,
            identity=identity,
            cwd=workdir or "/",
            env=variables,
            timeout_sec=timeout_sec,
            on_output=self._output_callback(),
            stdin_fd=stdin_fd,
            stdout_fd=stdout_fd,
            sandbox=self.session_id,
            memory_mb=self.limits.memory_mb,
        )

    def _running_init(self) -> SandboxInit:
        if self._init is None or not self._init.running:
            raise SandboxNotRunningError(
                f"Sandbox {self.session_id} is not running; call start() first (or it was stopped)."
            )
        return self._init

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await self._transfers.upload_file(source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await self._transfers.upload_dir(source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        await self._transfers.download_file(
            source_path, target_path, storage_mb=self._storage_bound()
        )

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await self._transfers.download_dir(source_dir, target_dir, storage_mb=self._storage_bound())

    def _storage_bound(self) -> int | None:
        return self._storage.size_mb if self._storage is not None else None


async def _attempted(step: Callable[[], object]) -> list[str]:
    """Run a blocking teardown step off the loop; what went wrong, if anything."""
    try:
        await asyncio.to_thread(step)
    except (SandboxCleanupError, SandboxStorageError, OSError) as error:
        return [str(error)]
    return []
