"""The sandbox one image build step runs in.

The same bubblewrap init as a trial's, in the sandbox's user namespace and a network
namespace of its own, on an overlay of the parent layers with the new layer as its
writable upper. A step gets what an attempt of its task gets (`build_bounds.py`): a
cgroup with the task's memory, cpu and pids limits, its writable layer on the task's
storage bound, and the sandbox's seccomp filter. Its commands run as root of that
namespace with its capabilities (apt and pip need them; see docs/sandbox.md for what
each phase may do). Its only way out is the registry proxy (`registry_proxy.py`), at
`PROXY_PORT` on its loopback, which `http_proxy` and `https_proxy` name.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shlex
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from synth_pipelines.sandbox.bases import BASE_ENV
from synth_pipelines.sandbox.build_bounds import (
    NO_SPACE,
    BuildLimitExceeded,
    BuildLimits,
    WritableLayer,
    writable_layer,
)
from synth_pipelines.sandbox.commands import CommandTimedOut, Completed, Process, run_to_completion
from synth_pipelines.sandbox.errors import SandboxUserError
from synth_pipelines.sandbox.identity import ROOT, Identity
from synth_pipelines.sandbox.image_mounts import image_bwrap_arguments
from synth_pipelines.sandbox.layers import LayerStore
from synth_pipelines.sandbox.limits import INIT_LEAF, SandboxCgroup, detect_hierarchy
from synth_pipelines.sandbox.namespace import SandboxInit
from synth_pipelines.sandbox.overlay import mount_overlay, mount_point, unmount
from synth_pipelines.sandbox.registry_hosts import RegistryHosts
from synth_pipelines.sandbox.registry_proxy import RegistryProxy
from synth_pipelines.sandbox.route import SandboxRoute
from synth_pipelines.sandbox.seccomp import filter_program
from synth_pipelines.sandbox.userns import host_id

PROXY_PORT = 3128
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
# pip, apt, npm and curl each read one spelling or the other.
PROXY_ENV = {name: PROXY_URL for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}


class BuildSandbox:
    """A bubblewrap init on an overlay of `lowers` whose upper is the step's writable
    layer, bounded like an attempt, for one build step."""

    root = ROOT

    def __init__(
        self,
        on_line: Callable[[str], None] | None,
        limits: BuildLimits,
        layer: WritableLayer,
        cgroup: SandboxCgroup | None,
    ):
        self.on_line = on_line
        self.limits = limits
        self.layer = layer
        self.cgroup = cgroup
        self.init: SandboxInit | None = None
        self._partial = ""
        self._out_of_space = False
        self._leaves = itertools.count(1)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        store: LayerStore,
        lowers: list[Path],
        diff: Path,
        *,
        limits: BuildLimits,
        registries: RegistryHosts,
        storage_mb: int | None = None,
        on_line: Callable[[str], None] | None = None,
    ) -> AsyncIterator[BuildSandbox]:
        """The sandbox of a step writing the layer `diff`; `storage_mb` is what the
        task's storage bound leaves it (None: unbounded). The layer is complete only
        once the block ends without an exception."""
        async with contextlib.AsyncExitStack() as stack:
            layer = await stack.enter_async_context(writable_layer(diff, storage_mb))
            cgroup = await asyncio.to_thread(_build_cgroup, diff.parent.name, limits)
            if cgroup is not None:
                stack.push_async_callback(asyncio.to_thread, cgroup.remove)
            sandbox = cls(on_line, limits, layer, cgroup)
            root_fd = await _mounted_root(stack, store, lowers, layer, diff.parent.name)
            procs_files = await asyncio.to_thread(cgroup.new_leaf, INIT_LEAF) if cgroup else []
            init = await SandboxInit.launch(
                image_bwrap_arguments(root_fd), procs_files, filter_program(), pass_fds=(root_fd,)
            )
            stack.push_async_callback(init.terminate)
            sandbox.init = init
            proxy = await stack.enter_async_context(
                RegistryProxy.serving(registries, on_refusal=sandbox._note)
            )
            route = SandboxRoute(init.pidfd, PROXY_PORT, proxy.socket_path)
            await route.open()
            stack.push_async_callback(route.close)
            yield sandbox

    def _note(self, line: str) -> None:
        if self.on_line is not None:
            self.on_line(line)

    async def _output(self, chunk: str, _stream: str) -> None:
        text = self._partial + chunk
        *lines, self._partial = text.split("\n")
        for line in lines:
            # pip and apt redraw progress lines with carriage returns: keep the last.
            shown = line.rsplit("\r", 1)[-1].rstrip()
            self._out_of_space = self._out_of_space or NO_SPACE in line
            if shown:
                self._note(shown)

    async def run(
        self,
        command: str,
        env: dict[str, str],
        identity: Identity,
        *,
        cwd: str,
        timeout_sec: float | None,
        stdin_fd: int | None = None,
    ) -> Completed:
        """Run `command`; a failure past one of the task's limits raises
        `BuildLimitExceeded` naming it."""
        init = self.init
        assert init is not None, "open() starts the init"
        leaf = f"step-{next(self._leaves):04d}"
        procs_files = (
            await asyncio.to_thread(self.cgroup.new_leaf, leaf) if self.cgroup is not None else []
        )
        start = init.command(
            command,
            cwd=cwd,
            env={"LANG": "C.UTF-8", **env, **PROXY_ENV},
            uid=identity.uid,
            gid=identity.gid,
            procs_files=procs_files,
            seccomp=filter_program(),
            build_step=True,
        )

        async def kill(process: Process) -> None:
            await asyncio.to_thread(init.kill_all_but_init)

        try:
            completed = await run_to_completion(
                start, timeout_sec=timeout_sec, kill=kill, on_output=self._output, stdin_fd=stdin_fd
            )
        except CommandTimedOut:
            return Completed(return_code=124, stdout="", stderr=f"timed out after {timeout_sec} s")
        if self._partial:
            await self._output("\n", "stdout")
        if completed.return_code != 0:
            await asyncio.to_thread(self._check_limits, leaf)
        return completed

    def _check_limits(self, leaf: str) -> None:
        """Raise `BuildLimitExceeded` for the limit a failed command ran into, if any."""
        resources = self.limits.resources
        oom_kills = self.cgroup.oom_kills(leaf) if self.cgroup is not None else 0
        if oom_kills:
            raise BuildLimitExceeded(
                "memory",
                f"{resources.memory_mb} MB",
                f"the kernel killed {oom_kills} of its processes for memory",
            )
        refused = self.cgroup.pids_refusals() if self.cgroup is not None else 0
        if refused:
            raise BuildLimitExceeded(
                "pids", str(resources.pids), f"{refused} fork(s) failed with EAGAIN"
            )
        storage = self.layer.storage
        if storage is not None and (self._out_of_space or self.layer.full()):
            raise BuildLimitExceeded(
                "storage",
                f"{self.limits.storage_mb} MB",
                f"its writes failed with ENOSPC ({NO_SPACE}); {storage.size_mb} MB of it "
                "was left to this step",
            )

    async def identity(self, user: str, *, task: str) -> Identity:
        """uid, gid and home of `user` (`name`, `uid`, `name:group`) in the image."""
        if user in ("root", "0"):
            return self.root
        name, _, group = user.partition(":")
        found = await self.run(
            f"getent passwd {shlex.quote(name)}", BASE_ENV, self.root, cwd="/", timeout_sec=30
        )
        fields = found.stdout.strip().split(":")
        if found.return_code != 0 or len(fields) < 6:
            if not name.isdigit():
                raise SandboxUserError(
                    f"Task {task!r}: USER {user} is not defined in the image's /etc/passwd; "
                    "create it with a RUN step (useradd) before the USER step"
                )
            fields = [name, "x", name, name, "", "/"]
        uid, gid, home = int(fields[2]), int(fields[3]), fields[5] or "/"
        if group:
            named = await self.run(
                f"getent group {shlex.quote(group)}", BASE_ENV, self.root, cwd="/", timeout_sec=30
            )
            parts = named.stdout.strip().split(":")
            if named.return_code == 0 and len(parts) >= 3:
                gid = int(parts[2])
            elif group.isdigit():
                gid = int(group)
            else:
                raise SandboxUserError(
                    f"Task {task!r}: group {group!r} of USER {user} is not in the image"
                )
        host_id(uid)
        host_id(gid)
        return Identity(uid, gid, home)


def _build_cgroup(name: str, limits: BuildLimits) -> SandboxCgroup | None:
    """The step's cgroup with the task's limits, where this host has a hierarchy (as
    for attempts: without one, no limit is enforced)."""
    hierarchy = detect_hierarchy()
    if hierarchy is None:
        return None
    cgroup = SandboxCgroup(hierarchy, f"build-{name}")
    cgroup.create(limits.resources)
    return cgroup


async def _mounted_root(
    stack: contextlib.AsyncExitStack,
    store: LayerStore,
    lowers: list[Path],
    layer: WritableLayer,
    name: str,
) -> int:
    """The overlay of `lowers` with the layer's upper, mounted; a descriptor of its
    root, closed and unmounted when `stack` unwinds."""
    merged = mount_point(f"build-{name}")
    layer.upper.mkdir(parents=True, exist_ok=True)
    os.chown(layer.upper, host_id(0), host_id(0))
    layer.upper.chmod(0o755)

    async def unmounted() -> None:
        await asyncio.to_thread(unmount, merged)
        await asyncio.to_thread(shutil.rmtree, layer.work, True)

    stack.push_async_callback(unmounted)
    await asyncio.to_thread(
        mount_overlay, merged.name, lowers, layer.upper, layer.work, relative_to=store.root
    )
    root_fd = os.open(merged, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    stack.callback(os.close, root_fd)
    return root_fd
