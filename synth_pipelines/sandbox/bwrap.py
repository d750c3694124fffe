"""`BwrapEnvironment`: Harbor's container-free local environment, built on bubblewrap.

Harbor loads it by import path, for agent and separate-verifier environments alike:
`EnvironmentConfig(import_path="synth_pipelines.sandbox.bwrap:BwrapEnvironment")`,
or `--env synth_pipelines.sandbox.bwrap:BwrapEnvironment` on Harbor's CLI. What it
isolates and how is written up in docs/sandbox.md.

Two modes, chosen by the task's Dockerfile (`dockerfile.py`): without RUN or USER
steps, the host's read-only system stands in for the base image and the task's files
are laid down in writable host directories; with them, the image is built into cached
layers (`image_build.py`) and the sandbox's root is an overlay of those layers with a
fresh writable layer of its own, discarded at teardown.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import tarfile
import tempfile
from collections.abc import AsyncIterator, Callable
from functools import cache
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from harbor.environments.base import BaseEnvironment, ExecResult, transfer_tar_filter
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
from harbor.environments.options import EnvironmentOptions
from harbor.models.task.config import NetworkMode
from harbor.models.trial.config import ResourceMode
from harbor.models.trial.paths import EnvironmentPaths
from pydantic import Field

from synth_pipelines.config import settings
from synth_pipelines.sandbox.attach import attach
from synth_pipelines.sandbox.bases import BASE_ENV, resolve_base
from synth_pipelines.sandbox.commands import CommandTimedOut, Process, run_to_completion
from synth_pipelines.sandbox.dockerfile import DockerfileRecipe, read_dockerfile
from synth_pipelines.sandbox.errors import (
    MemoryLimitExceededError,
    SandboxCleanupError,
    SandboxCommandTimeoutError,
    SandboxNotRunningError,
    SandboxPathError,
    SandboxStorageError,
    SandboxUserError,
    TaskDefinitionError,
    UnsupportedTaskError,
)
from synth_pipelines.sandbox.filesystem import (
    Bind,
    SandboxFilesystem,
    resolve_sources,
    top_level,
    writable_top,
)
from synth_pipelines.sandbox.image_build import Image, ImageBuilder
from synth_pipelines.sandbox.image_root import image_bwrap_arguments, make_directory, make_file
from synth_pipelines.sandbox.layers import Held
from synth_pipelines.sandbox.leases import SandboxLease, image_root, reclaim_orphans
from synth_pipelines.sandbox.limits import (
    INIT_LEAF,
    ResourceLimits,
    SandboxCgroup,
    detect_hierarchy,
)
from synth_pipelines.sandbox.namespace import SYSTEM_PATH, TERMINATE_DEADLINE_SEC, SandboxInit
from synth_pipelines.sandbox.overlay import mount_overlay, unmount
from synth_pipelines.sandbox.quarantine import quarantine
from synth_pipelines.sandbox.route import RouteTarget, SandboxRoute
from synth_pipelines.sandbox.seccomp import filter_program
from synth_pipelines.sandbox.storage import (
    IMAGE_NAME,
    SizedFilesystem,
    can_mount_sized_filesystem,
)
from synth_pipelines.sandbox.userns import SETUP_ID, host_id

ROOT_HOME = PurePosixPath("/root")
INSTALLED_AGENT_DIR = PurePosixPath("/installed-agent")
TMP_DIR = PurePosixPath("/tmp")
TRANSFER_TIMEOUT_SEC = 600
KILLED_BY_SIGKILL = 128 + signal.SIGKILL
# What root on an image may do beyond a plain user: act on any file of the sandbox
# (an image's files keep the owners its archives had, e.g. a project's sdist made by
# uid 501, and Docker's root may edit them). In the sandbox's user namespace these
# reach only inodes whose owners it maps, never a host file; no capability to mount,
# change users, signal or administer anything is given. CAP_CHOWN, CAP_DAC_OVERRIDE,
# CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID.
IMAGE_ROOT_CAPABILITIES = (0, 1, 2, 3, 4)

logger = logging.getLogger(__name__)


@cache
def _reclaim_orphans_once(sandboxes_dir: Path) -> None:
    """Reclaim what processes killed outright left under `sandboxes_dir`, the first time
    this process starts a sandbox there."""
    for reclaimed in reclaim_orphans(sandboxes_dir, detect_hierarchy()):
        if reclaimed.quarantine is not None:
            logger.warning(
                "Sandbox %s, left by a process that died without stopping it, could not be "
                "removed and is quarantined (%s): %s",
                reclaimed.sandbox_dir,
                reclaimed.quarantine,
                "; ".join(reclaimed.problems),
            )
        else:
            logger.warning(
                "Reclaimed sandbox %s, left by a process that died without stopping it: "
                "its cgroup is removed, its files are kept, unmounted.",
                reclaimed.sandbox_dir,
            )


class BwrapOptions(EnvironmentOptions):
    """`--ek` options of the bwrap environment."""

    pids_max: int = Field(
        default=4096,
        ge=16,
        description="Most processes and threads the sandbox may hold at once (cgroup pids.max).",
    )
    read_only_binds: list[str] = Field(
        default_factory=list,
        description="'HOST_PATH:SANDBOX_PATH' bound read-only, e.g. a harness's runtime. "
        "Unlike Harbor's `mounts`, these reach the separate verifier environment too "
        "(a judge runs there).",
    )


class BwrapEnvironment(BaseEnvironment):
    """A Harbor environment in bubblewrap namespaces on this host; see docs/sandbox.md."""

    options_model = BwrapOptions

    def __init__(self, *args, **kwargs):
        self._recipe: DockerfileRecipe | None = None
        self._init: SandboxInit | None = None
        self._cgroup: SandboxCgroup | None = None
        self._routes: list[SandboxRoute] = []
        self._storage: SizedFilesystem | None = None
        self._lease: SandboxLease | None = None
        self._image: Image | None = None
        self._held: Held | None = None
        self._identities: dict[str, tuple[int, int, str]] = {}
        self._exec_numbers = itertools.count(1)
        super().__init__(*args, **kwargs)
        name = f"{re.sub(r'[^A-Za-z0-9._-]', '_', self.session_id)}-{secrets.token_hex(4)}"
        self.sandbox_dir = settings().sandboxes_dir / name
        self._filesystem = SandboxFilesystem(
            self.sandbox_dir, self._writable_tops(), self._host_binds()
        )
        hierarchy = detect_hierarchy()
        self._cgroup_name = name
        self._hierarchy = hierarchy

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
        if self._recipe is None:
            raise RuntimeError("the environment definition has not been validated")
        return self._recipe

    @property
    def image(self) -> Image | None:
        """The image the sandbox runs on, once started on one."""
        return self._image

    @property
    def limits(self) -> ResourceLimits:
        options = self.options if isinstance(self.options, BwrapOptions) else BwrapOptions()
        return ResourceLimits(
            memory_mb=self._resource_limit_value("memory", auto_mode=ResourceMode.LIMIT),
            cpus=self._resource_limit_value("cpu", auto_mode=ResourceMode.LIMIT),
            pids=options.pids_max,
        )

    def _validate_definition(self) -> None:
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
        if recipe.needs_build:
            resolve_base(recipe.base_image, task=task)
            recipe = read_dockerfile(dockerfile, task=task, base_env=BASE_ENV)
            for step in recipe.copies:
                try:
                    resolve_sources(step, self.environment_dir)
                except (FileNotFoundError, PermissionError) as error:
                    raise TaskDefinitionError(task, str(error)) from None
            self._recipe = recipe
            return
        for workdir in recipe.workdirs:
            writable_top(workdir, task=task, why="WORKDIR")
        for step in recipe.copies:
            writable_top(step.destination, task=task, why=f"COPY destination (line {step.line})")
            try:
                resolve_sources(step, self.environment_dir)
            except (FileNotFoundError, PermissionError) as error:
                raise TaskDefinitionError(task, str(error)) from None
        if self.task_env_config.workdir:
            writable_top(
                PurePosixPath(self.task_env_config.workdir), task=task, why="[environment].workdir"
            )
        self._recipe = recipe

    def _writable_tops(self) -> set[str]:
        if self.recipe.needs_build:
            # The image's root is writable as a whole: its own upper layer.
            return set()
        paths = EnvironmentPaths.for_os(self.os)
        fixed = [
            paths.logs_dir,
            paths.tests_dir,
            paths.solution_dir,
            paths.default_skills_dir,
            INSTALLED_AGENT_DIR,
            TMP_DIR,
            ROOT_HOME,
            *self.recipe.workdirs,
            *(step.destination for step in self.recipe.copies),
        ]
        if self.task_env_config.workdir:
            fixed.append(PurePosixPath(self.task_env_config.workdir))
        return {top_level(path) for path in fixed}

    def _host_binds(self) -> list[Bind]:
        options = self.options if isinstance(self.options, BwrapOptions) else BwrapOptions()
        binds = []
        for spec in options.read_only_binds:
            source, separator, target = spec.partition(":")
            if not separator or not target.startswith("/"):
                raise SandboxPathError(
                    f"read_only_binds entry {spec!r} must be 'HOST_PATH:/SANDBOX_PATH'"
                )
            binds.append(
                Bind(source=Path(source).resolve(), target=PurePosixPath(target), read_only=True)
            )
        for mount in self._host_mounts:
            if mount["type"] != "bind":
                raise UnsupportedTaskError(
                    self.environment_name,
                    f"{mount['type']} mount {mount['target']!r} is not supported; "
                    "the local sandbox only binds host directories",
                )
            binds.append(
                Bind(
                    source=Path(mount["source"]).resolve(),
                    target=PurePosixPath(mount["target"]),
                    read_only=bool(mount.get("read_only")),
                )
            )
        return binds

    async def start(self, force_build: bool) -> None:
        self._log_unenforced_requests()
        await asyncio.to_thread(_reclaim_orphans_once, self.sandbox_dir.parent)
        if self.recipe.needs_build:
            await self._start_on_image()
            return
        try:
            await asyncio.to_thread(self._lay_down)
            procs_files = await asyncio.to_thread(self._create_cgroup)
            self._init = await SandboxInit.launch(
                self._filesystem.bwrap_arguments(), procs_files, filter_program()
            )
            await asyncio.to_thread(
                attach, self._init.pidfd, self._init.root_fd, self._filesystem.attachments()
            )
            await self.ensure_dirs(self._mount_targets(writable_only=True))
        except BaseException:
            await asyncio.shield(self.stop(delete=True))
            raise

    async def _start_on_image(self) -> None:
        """Build (or find) the image, then run the sandbox on its layers with a writable
        layer of its own on the sandbox's storage."""
        builder = ImageBuilder.configured(
            settings(), progress=lambda line: self.logger.debug("image build: %s", line)
        )
        image = await builder.build(self.recipe, self.environment_dir, task=self.environment_name)
        if builder.built:
            self.logger.info(
                "Built %d layer(s) of the image of %s (%d cached)",
                builder.built,
                self.environment_name,
                builder.cached,
            )
        try:
            self._held = await asyncio.to_thread(builder.store.hold, list(image.layers))
            self._image = image
            root_fd = await asyncio.to_thread(self._mount_image, builder.store.root)
            try:
                procs_files = await asyncio.to_thread(self._create_cgroup)
                self._init = await SandboxInit.launch(
                    image_bwrap_arguments(root_fd),
                    procs_files,
                    filter_program(),
                    pass_fds=(root_fd,),
                )
            finally:
                os.close(root_fd)
            binds = [(bind.source, bind.target, bind.read_only) for bind in self._filesystem.binds]
            await asyncio.to_thread(attach, self._init.pidfd, self._init.root_fd, binds)
            await self.ensure_dirs(self._mount_targets(writable_only=True))
            if not self._enable_environment_dir_upload:
                await self.upload_dir(
                    self.environment_dir, str(EnvironmentPaths.for_os(self.os).tests_dir)
                )
        except BaseException:
            await asyncio.shield(self.stop(delete=True))
            raise

    def _mount_image(self, store_root: Path) -> int:
        """Mount the image's layers with a fresh upper on `<sandbox>/root`, make the
        Harbor directories and bind mountpoints in it; an O_PATH descriptor of it."""
        assert self._image is not None
        self._take_lease_and_storage()
        writable = self._filesystem.writable_root
        upper, work = writable / "upper", writable / "work"
        upper.mkdir(parents=True, exist_ok=True)
        os.chown(upper, host_id(0), host_id(0))
        upper.chmod(0o755)
        root = mount_overlay(
            image_root(self.sandbox_dir).name,
            [layer.diff for layer in self._image.layers],
            upper,
            work,
            relative_to=store_root,
        )
        root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            paths = EnvironmentPaths.for_os(self.os)
            for directory in (
                paths.logs_dir,
                paths.tests_dir,
                paths.solution_dir,
                INSTALLED_AGENT_DIR,
                ROOT_HOME,
            ):
                make_directory(root_fd, PurePosixPath(directory))
            for bind in self._filesystem.binds:
                if not bind.read_only:
                    bind.source.mkdir(parents=True, exist_ok=True)
                    os.chown(bind.source, host_id(0), host_id(0))
                if bind.source.is_dir():
                    make_directory(root_fd, bind.target)
                else:
                    make_file(root_fd, bind.target)
        except BaseException:
            os.close(root_fd)
            raise
        return root_fd

    def _take_lease_and_storage(self) -> None:
        self._lease = SandboxLease.take(self.sandbox_dir)
        storage_mb = self._effective_storage_mb
        if storage_mb and can_mount_sized_filesystem():
            self._storage = SizedFilesystem(
                self._filesystem.writable_root, self.sandbox_dir / IMAGE_NAME, storage_mb
            )
            self._storage.mount()

    def _lay_down(self) -> None:
        self._take_lease_and_storage()
        self._filesystem.create()
        self._filesystem.lay_down(self.recipe, self.environment_dir)
        if not self._enable_environment_dir_upload:
            # Bundled tests: Harbor skips uploading tests/, expecting the verifier
            # image to hold them at /tests already.
            self._filesystem.copy_into(
                self.environment_dir, EnvironmentPaths.for_os(self.os).tests_dir
            )

    def _create_cgroup(self) -> list[Path]:
        if self._hierarchy is None:
            return []
        self._cgroup = SandboxCgroup(self._hierarchy, self._cgroup_name)
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
        if self._image is not None:
            problems += await _attempted(lambda: unmount(image_root(self.sandbox_dir)))
        if self._held is not None:
            self._held.release()
            self._held = None
        if self._storage is not None:
            storage, self._storage = self._storage, None
            release = storage.unmount if delete else storage.unmount_keeping_files
            problems += await _attempted(release)
        if delete:
            problems += await _attempted(self._filesystem.remove)
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
        shared mode; `verification.py` calls this): every process the agent left is
        killed, and `/logs/verifier` is emptied, so that the reward files there can only
        be the verifier's own."""
        init = self._running_init()
        await asyncio.to_thread(init.kill_all_but_init)
        verifier_dir = EnvironmentPaths.for_os(self.os).verifier_dir
        emptied = await self.exec(self._empty_dirs_command([verifier_dir]), user="root")
        if emptied.return_code != 0:
            raise SandboxPathError(
                f"could not empty {verifier_dir} in sandbox {self.session_id} before its "
                f"verifier (exit {emptied.return_code}): {emptied.stderr or emptied.stdout}"
            )

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
        resolved = self._resolve_user(user)
        if self._image is None:
            uid, gid, home = _identity(resolved)
        else:
            uid, gid, home = await self._image_identity(
                resolved if resolved is not None else self._image.user
            )
        workdir = effective_exec_cwd(
            cwd,
            self.task_env_config.workdir,
            str(self.recipe.workdir) if self.recipe.workdir else None,
        )
        variables = {
            "HOME": home,
            "LANG": "C.UTF-8",
            **self.recipe.env,
            **(self._merge_env(env) or {}),
        }
        leaf = f"exec-{next(self._exec_numbers):06d}"
        cgroup = self._cgroup
        procs_files = cgroup.new_leaf(leaf) if cgroup is not None else []
        start = init.command(
            command,
            cwd=workdir or "/",
            env=variables,
            uid=uid,
            gid=gid,
            procs_files=procs_files,
            seccomp=filter_program(),
            capabilities=IMAGE_ROOT_CAPABILITIES if self._image is not None and uid == 0 else (),
        )

        async def kill(process: Process) -> None:
            # The launcher and the command it forked first: a command that has not yet
            # joined its leaf cgroup is not among the leaf's processes.
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            if cgroup is not None:
                await asyncio.to_thread(cgroup.kill, leaf)

        try:
            completed = await run_to_completion(
                start,
                timeout_sec=timeout_sec,
                kill=kill,
                on_output=self._output_callback(),
                stdin_fd=stdin_fd,
                stdout_fd=stdout_fd,
            )
        except CommandTimedOut:
            raise SandboxCommandTimeoutError(
                f"Command timed out after {timeout_sec} seconds in sandbox "
                f"{self.session_id}; it and every process it started were killed: "
                f"{_abbreviate(command)}"
            ) from None
        finally:
            oom_kills = cgroup.oom_kills(leaf) if cgroup is not None else 0
            if cgroup is not None:
                cgroup.remove_leaf(leaf)
        stderr = completed.stderr
        if oom_kills:
            message = (
                f"Sandbox {self.session_id} exceeded its memory limit of "
                f"{self.limits.memory_mb} MB: the kernel killed {oom_kills} process(es) of "
                f"{_abbreviate(command)}. Raise [environment].memory_mb in task.toml "
                "(or override_memory_mb) or make the command use less memory."
            )
            if completed.return_code == KILLED_BY_SIGKILL:
                raise MemoryLimitExceededError(message)
            stderr = f"{stderr}\n{message}\n"
        return ExecResult(
            stdout=completed.stdout or None,
            stderr=stderr or None,
            return_code=completed.return_code,
        )

    async def _image_identity(self, user: str | int | None) -> tuple[int, int, str]:
        """uid, gid and HOME of a user of the image, looked up in its own /etc/passwd
        (inside the sandbox, never through the host's view of its files)."""
        if user is None or user in ("root", 0, "0"):
            return 0, 0, str(ROOT_HOME)
        name = str(user)
        if name not in self._identities:
            found = await self._run_inside(f"getent passwd {shlex.quote(name)}", user="root")
            fields = (found.stdout or "").strip().split(":")
            if found.return_code == 0 and len(fields) >= 6:
                identity = (int(fields[2]), int(fields[3]), fields[5] or str(TMP_DIR))
            elif name.isdigit():
                identity = (int(name), int(name), str(TMP_DIR))
            else:
                raise SandboxUserError(
                    f"user {name!r} is not defined in the image's /etc/passwd; use root, a "
                    "numeric uid, or create the user with a RUN step (useradd)"
                )
            for inside in identity[:2]:
                host_id(inside)
            if identity[0] == SETUP_ID:
                raise SandboxUserError(
                    f"uid {SETUP_ID} is the sandbox's own (its init runs as it); use another uid"
                )
            self._identities[name] = identity
        return self._identities[name]

    def _running_init(self) -> SandboxInit:
        if self._init is None or not self._init.running:
            raise SandboxNotRunningError(
                f"Sandbox {self.session_id} is not running; call start() first (or it was stopped)."
            )
        return self._init

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        source = Path(source_path)
        if not source.is_file():
            raise SandboxPathError(f"upload source {source} is not a file")
        target = PurePosixPath(target_path)
        await self._push(target.parent, [(source, target.name)])

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        source = Path(source_dir)
        if not source.is_dir():
            raise SandboxPathError(f"upload source {source} is not a directory")
        members = [(child, child.name) for child in source.iterdir()]
        await self._push(PurePosixPath(target_dir), members)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        source = PurePosixPath(source_path)
        # -h: the file a symlink names inside the sandbox, archived as what it is, so a
        # link to a device, fifo or directory arrives as that entry alone, not content.
        command = (
            f"tar -chf - --sparse --no-recursion -C {shlex.quote(str(source.parent))} "
            f"-- {shlex.quote(source.name)}"
        )
        async with self._pulled(command, source_path) as archive_file:
            with tarfile.open(fileobj=archive_file) as archive:
                member = archive.next()
                if member is None or not member.isfile():
                    raise SandboxPathError(
                        f"{source_path!r} in sandbox {self.session_id} is not a regular file"
                    )
                target = Path(target_path)
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.extractfile(member) as content, target.open("wb") as out:
                    shutil.copyfileobj(content, out, 1 << 20)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        command = f"tar -cf - --sparse -C {shlex.quote(source_dir)} ."
        async with self._pulled(command, source_dir) as archive_file:
            target = Path(target_dir)
            target.mkdir(parents=True, exist_ok=True)
            with tarfile.open(fileobj=archive_file) as archive:
                archive.extractall(target, filter=self._downloadable)

    async def _push(self, target_dir: PurePosixPath, members: list[tuple[Path, str]]) -> None:
        with self._transfer_file() as archive_file:
            with tarfile.open(fileobj=archive_file, mode="w") as archive:
                for path, name in members:
                    archive.add(path, arcname=name, filter=_owned_by_root)
            archive_file.seek(0)
            quoted = shlex.quote(str(target_dir))
            await self._transfer(
                f"mkdir -p {quoted} && tar -xf - -C {quoted} --no-same-owner",
                str(target_dir),
                stdin_fd=archive_file.fileno(),
            )

    @contextlib.asynccontextmanager
    async def _pulled(self, command: str, path: str) -> AsyncIterator[BinaryIO]:
        """A host file holding what `command` writes to stdout inside the sandbox.

        With a storage bound, a download is capped at twice `storage_mb`: the sandbox's
        own files fit in that, so anything larger reaches beyond them (through a link
        to the host's system directories) and must not fill the host's disk.
        """
        limit = 2 * self._storage.size_mb * 2**20 if self._storage is not None else None
        with self._transfer_file() as archive_file:
            await self._transfer(command, path, stdout_fd=archive_file.fileno(), stdout_limit=limit)
            archive_file.seek(0)
            yield archive_file

    def _transfer_file(self) -> BinaryIO:
        """An anonymous host file for a transfer, outside the sandbox's writable state.

        Transfers never stage inside the sandbox: a sandbox that filled its storage
        can still hand over its logs, and nothing inside can swap a staged file.
        """
        return tempfile.TemporaryFile(dir=self.sandbox_dir)

    async def _transfer(
        self,
        command: str,
        path: str,
        *,
        stdin_fd: int | None = None,
        stdout_fd: int | None = None,
        stdout_limit: int | None = None,
    ) -> None:
        """Run a transfer step inside the sandbox as root; with `stdout_limit`, output
        past that many bytes is cut off and the transfer refused."""
        if stdout_limit is not None:
            command = f"set -o pipefail; {command} | head -c {stdout_limit + 1}"
        result = await self._run_inside(
            command,
            timeout_sec=TRANSFER_TIMEOUT_SEC,
            user="root",
            stdin_fd=stdin_fd,
            stdout_fd=stdout_fd,
        )
        over_limit = (
            stdout_limit is not None
            and stdout_fd is not None
            and os.fstat(stdout_fd).st_size > stdout_limit
        )
        if over_limit:
            raise SandboxPathError(
                f"Transfer of {path!r} from sandbox {self.session_id} exceeds "
                f"{stdout_limit >> 20} MB, twice the sandbox's storage_mb: it reaches "
                "beyond the sandbox's own files (a link to host directories?) and was refused"
            )
        if result.return_code != 0:
            raise SandboxPathError(
                f"Transfer of {path!r} in sandbox {self.session_id} failed "
                f"(exit {result.return_code}): {(result.stderr or result.stdout or '').strip()}"
            )

    def _downloadable(self, member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo | None:
        """Harbor's transfer filter, skipping (not failing on) links that leave the tree.

        Such links are common (a virtualenv's `python -> /usr/bin/python3`), but on the
        host they would point at the host's files, so they are dropped with a warning.
        """
        try:
            return transfer_tar_filter(member, destination)
        except tarfile.FilterError as error:
            self.logger.warning("Not downloading %s from sandbox: %s", member.name, error)
            return None


def _identity(user: str | int | None) -> tuple[int, int, str]:
    """uid, gid (of the sandbox's user namespace) and HOME for a Harbor user; names are
    looked up in /etc/passwd."""
    if user is None or user in ("root", 0, "0"):
        return 0, 0, str(ROOT_HOME)
    try:
        entry = pwd.getpwuid(int(user)) if str(user).isdigit() else pwd.getpwnam(str(user))
    except KeyError:
        if not str(user).isdigit():
            raise SandboxUserError(
                f"user {user!r} is not defined in /etc/passwd, which the sandbox shares "
                "with the host; use root, a numeric uid, or a user the host defines"
            ) from None
        uid = gid = int(user)
    else:
        uid, gid = entry.pw_uid, entry.pw_gid
    for inside in (uid, gid):
        host_id(inside)  # refuses an id the sandbox's user namespace does not map
    if uid == SETUP_ID:
        raise SandboxUserError(
            f"uid {SETUP_ID} is the sandbox's own (its init runs as it); use another uid"
        )
    return uid, gid, str(TMP_DIR)


def _owned_by_root(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.uid = member.gid = 0
    member.uname = member.gname = "root"
    return member


async def _attempted(step: Callable[[], object]) -> list[str]:
    """Run a blocking teardown step off the loop; what went wrong, if anything."""
    try:
        await asyncio.to_thread(step)
    except (SandboxCleanupError, SandboxStorageError, OSError) as error:
        return [str(error)]
    return []


def _abbreviate(command: str, limit: int = 200) -> str:
    flat = " ".join(command.split())
    return repr(flat if len(flat) <= limit else f"{flat[:limit]}...")
