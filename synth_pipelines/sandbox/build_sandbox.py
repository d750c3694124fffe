"""The sandbox one image build step runs in (or a look inside a built image takes).

The same bubblewrap init as a trial's, in the sandbox's user namespace, on an overlay
of the parent layers with the new layer's directory as its writable upper, and with
the host's network and resolver (`RUN` fetches from package registries). Its commands
run as root of that namespace with its capabilities and without the seccomp filter
(apt and pip need them; see docs/sandbox.md for what each phase may do).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path, PurePosixPath

from synth_pipelines.sandbox.attach import attach
from synth_pipelines.sandbox.bases import BASE_ENV
from synth_pipelines.sandbox.commands import CommandTimedOut, Completed, Process, run_to_completion
from synth_pipelines.sandbox.errors import SandboxUserError
from synth_pipelines.sandbox.identity import ROOT, Identity
from synth_pipelines.sandbox.image_mounts import image_bwrap_arguments, make_file
from synth_pipelines.sandbox.layers import LayerStore
from synth_pipelines.sandbox.namespace import SandboxInit
from synth_pipelines.sandbox.overlay import mount_overlay, mount_point, unmount
from synth_pipelines.sandbox.seccomp import filter_program
from synth_pipelines.sandbox.userns import host_id

RESOLVER = PurePosixPath("/etc/resolv.conf")


class BuildSandbox:
    """A bubblewrap init on an overlay of `lowers` whose upper is `upper`, with the
    host's network, for one build step (or a look inside a built image)."""

    root = ROOT

    def __init__(self, init: SandboxInit, on_line: Callable[[str], None] | None):
        self.init = init
        self.on_line = on_line
        self._partial = ""

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        store: LayerStore,
        lowers: list[Path],
        upper: Path,
        on_line: Callable[[str], None] | None = None,
    ) -> AsyncIterator[BuildSandbox]:
        scratch = upper.parent
        merged, work = mount_point(f"build-{scratch.name}"), scratch / "work"
        upper.mkdir(parents=True, exist_ok=True)
        os.chown(upper, host_id(0), host_id(0))
        upper.chmod(0o755)
        root_fd: int | None = None
        init: SandboxInit | None = None
        try:
            await asyncio.to_thread(
                mount_overlay, merged.name, lowers, upper, work, relative_to=store.root
            )
            root_fd = os.open(merged, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            await asyncio.to_thread(make_file, root_fd, RESOLVER)
            init = await SandboxInit.launch(
                image_bwrap_arguments(root_fd),
                [],
                filter_program(),
                pass_fds=(root_fd,),
                network=True,
            )
            await asyncio.to_thread(
                attach, init.pidfd, init.root_fd, [(Path("/etc/resolv.conf"), RESOLVER, True)]
            )
            yield cls(init, on_line)
        finally:
            if init is not None:
                await init.terminate()
            if root_fd is not None:
                os.close(root_fd)
            await asyncio.to_thread(unmount, merged)
            await asyncio.to_thread(shutil.rmtree, work, True)

    async def _output(self, chunk: str, _stream: str) -> None:
        if self.on_line is None:
            return
        text = self._partial + chunk
        *lines, self._partial = text.split("\n")
        for line in lines:
            # pip and apt redraw progress lines with carriage returns: keep the last.
            shown = line.rsplit("\r", 1)[-1].rstrip()
            if shown:
                self.on_line(shown)

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
        start = self.init.command(
            command,
            cwd=cwd,
            env={"LANG": "C.UTF-8", **env},
            uid=identity.uid,
            gid=identity.gid,
            procs_files=[],
            seccomp=b"",
            build_step=True,
        )

        async def kill(process: Process) -> None:
            await asyncio.to_thread(self.init.kill_all_but_init)

        try:
            completed = await run_to_completion(
                start, timeout_sec=timeout_sec, kill=kill, on_output=self._output, stdin_fd=stdin_fd
            )
        except CommandTimedOut:
            return Completed(return_code=124, stdout="", stderr=f"timed out after {timeout_sec} s")
        if self._partial:
            await self._output("\n", "stdout")
        return completed

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
