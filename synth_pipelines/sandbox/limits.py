"""Resource limits for a sandbox, enforced by a cgroup per environment.

Each environment gets `synth-sandboxes/<name>` in the memory, pids and cpu
controllers (cgroup v2, or the v1 hierarchies where v2 has no controllers). The
limits sit on that cgroup, so they bound the whole sandbox; every command runs in a
leaf of its own below it, which is what lets a timeout or cancellation kill exactly
one command's process tree (children that detach included) and lets an OOM kill be
attributed to the command that suffered it.

rlimits are no substitute and are not used: RLIMIT_AS caps address space rather
than memory (it breaks runtimes that reserve large mappings), RLIMIT_NPROC counts a
user's processes host-wide and is not enforced for root, and RLIMIT_CPU caps total
CPU seconds rather than a share. Without a writable cgroup hierarchy the sandbox
says so through `resource_capabilities()` and enforces no limits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from synth_pipelines.sandbox.errors import SandboxCleanupError

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT_NAME = "synth-sandboxes"
CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000
KILL_DEADLINE_SEC = 10.0
KILL_RECHECK_SEC = 0.02
# bwrap itself lives here with the sandbox's pid 1, so that it is counted against
# the sandbox's limits and can reap pid 1 when it is killed.
INIT_LEAF = "init"


def kill_until_empty(
    find: Callable[[], Collection[int]], describe: Callable[[Collection[int]], str]
) -> None:
    """SIGKILL every process `find` lists until it lists none twice, a moment apart.

    A child still being forked is not listed yet, so one empty read is not proof; what
    still lists processes after `KILL_DEADLINE_SEC` is raised as `describe` words it.
    """
    deadline = time.monotonic() + KILL_DEADLINE_SEC
    empty_reads = 0
    while empty_reads < 2:
        pids = find()
        empty_reads = 0 if pids else empty_reads + 1
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if pids and time.monotonic() > deadline:
            raise SandboxCleanupError(
                f"{describe(pids)} survived SIGKILL for {KILL_DEADLINE_SEC} s"
            )
        if empty_reads < 2:
            time.sleep(KILL_RECHECK_SEC)


@dataclass(frozen=True)
class ResourceLimits:
    memory_mb: int | None = None
    cpus: float | None = None
    pids: int | None = None


@dataclass(frozen=True)
class CgroupHierarchy:
    """Where the memory, pids and cpu controllers are mounted, and which version."""

    version: Literal[1, 2]
    mounts: dict[str, Path]


@cache
def detect_hierarchy() -> CgroupHierarchy | None:
    """The writable hierarchy holding all three controllers, if this host has one."""
    unified = CGROUP_ROOT / "cgroup.controllers"
    if unified.exists():
        available = unified.read_text().split()
        if all(name in available for name in CONTROLLERS) and os.access(CGROUP_ROOT, os.W_OK):
            return CgroupHierarchy(2, dict.fromkeys(CONTROLLERS, CGROUP_ROOT))
        return None
    mounts = _v1_mounts()
    if all(name in mounts for name in CONTROLLERS) and all(
        os.access(path, os.W_OK) for path in mounts.values()
    ):
        return CgroupHierarchy(1, {name: mounts[name] for name in CONTROLLERS})
    return None


def _v1_mounts() -> dict[str, Path]:
    mounts: dict[str, Path] = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mount_point, fstype, options, *_ = line.split()
        if fstype != "cgroup":
            continue
        for option in options.split(","):
            if option in CONTROLLERS:
                mounts[option] = Path(mount_point)
    return mounts


class SandboxCgroup:
    """One environment's cgroup: limits for the sandbox, one leaf per command."""

    def __init__(self, hierarchy: CgroupHierarchy, name: str):
        self.hierarchy = hierarchy
        self.name = name

    @property
    def directories(self) -> list[Path]:
        """This sandbox's cgroup directory in each distinct hierarchy."""
        roots = dict.fromkeys(self.hierarchy.mounts.values())
        return [root / PARENT_NAME / self.name for root in roots]

    def _directory(self, controller: str) -> Path:
        return self.hierarchy.mounts[controller] / PARENT_NAME / self.name

    def create(self, limits: ResourceLimits) -> None:
        if self.hierarchy.version == 2:
            _enable_controllers(CGROUP_ROOT)
            (CGROUP_ROOT / PARENT_NAME).mkdir(exist_ok=True)
            _enable_controllers(CGROUP_ROOT / PARENT_NAME)
        for directory in self.directories:
            directory.mkdir(parents=True)
        if self.hierarchy.version == 2:
            _enable_controllers(self._directory("memory"))
        self._apply(limits)

    def _apply(self, limits: ResourceLimits) -> None:
        memory = self._directory("memory")
        pids = self._directory("pids")
        cpu = self._directory("cpu")
        v2 = self.hierarchy.version == 2
        if limits.memory_mb is not None:
            limit = str(limits.memory_mb * 2**20)
            # Swap counts against the limit too, or a task could trade RAM for swap.
            if v2:
                _write(memory / "memory.max", limit)
                _write_if_present(memory / "memory.swap.max", "0")
            else:
                _write(memory / "memory.limit_in_bytes", limit)
                _write_if_present(memory / "memory.memsw.limit_in_bytes", limit)
        if limits.pids is not None:
            _write(pids / "pids.max", str(limits.pids))
        if limits.cpus is not None:
            quota = max(1000, int(limits.cpus * CPU_PERIOD_US))
            if v2:
                _write(cpu / "cpu.max", f"{quota} {CPU_PERIOD_US}")
            else:
                _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                _write(cpu / "cpu.cfs_quota_us", str(quota))

    def new_leaf(self, leaf: str) -> list[Path]:
        """Create a leaf; returns the `cgroup.procs` files a process must join."""
        procs = []
        for directory in self.directories:
            (directory / leaf).mkdir()
            procs.append(directory / leaf / "cgroup.procs")
        return procs

    def leaves(self) -> list[str]:
        first = self.directories[0]
        if not first.is_dir():
            return []
        return sorted(entry.name for entry in first.iterdir() if entry.is_dir())

    def processes(self, leaf: str) -> set[int]:
        """Every process in the leaf or in a cgroup below it, in any hierarchy."""
        found: set[int] = set()
        for directory in self.directories:
            for cgroup in _subtree(directory / leaf):
                try:
                    found.update(int(pid) for pid in (cgroup / "cgroup.procs").read_text().split())
                except FileNotFoundError:
                    continue
        return found

    def kill(self, leaf: str) -> None:
        """SIGKILL every process in the leaf (and in whatever cgroups were made below
        it), repeating until it stays empty.

        A child still being forked is not yet listed in `cgroup.procs`, so one empty
        read is not proof (cgroup v1 has no atomic `cgroup.kill`); the leaf must read
        empty twice, a moment apart.
        """
        kill_file = self.directories[0] / leaf / "cgroup.kill"
        if self.hierarchy.version == 2 and kill_file.exists():
            _write(kill_file, "1")
        where = "/".join(filter(None, (self.name, leaf)))
        kill_until_empty(
            lambda: self.processes(leaf),
            lambda pids: f"processes {sorted(pids)} in sandbox cgroup {where}",
        )

    def kill_commands(self) -> None:
        """Kill every command's processes, leaving the sandbox's init to its owner."""
        for leaf in self.leaves():
            if leaf != INIT_LEAF:
                self.kill(leaf)

    def oom_kills(self, leaf: str) -> int:
        """How many processes of the leaf the OOM killer has killed."""
        memory = self._directory("memory") / leaf
        name = "memory.events" if self.hierarchy.version == 2 else "memory.oom_control"
        try:
            lines = (memory / name).read_text().splitlines()
        except FileNotFoundError:
            return 0
        for line in lines:
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def pids_refusals(self) -> int:
        """How many forks the pids limit has refused in the sandbox (at most; from its
        cgroups' `pids.events`). Kernels count them where the fork was refused (v1,
        and v2 before Linux 6.12 or with `pids_localevents`), or in the cgroup over its
        limit and its ancestors: the largest count over the sandbox's cgroups is right
        in each."""
        found = 0
        for cgroup in _subtree(self._directory("pids")):
            try:
                lines = (cgroup / "pids.events").read_text().splitlines()
            except FileNotFoundError:
                continue
            for line in lines:
                key, _, value = line.partition(" ")
                if key == "max":
                    found = max(found, int(value))
        return found

    def remove_leaf(self, leaf: str) -> bool:
        """Remove the leaf if its processes are gone; False while some still run (or
        while cgroups made below it remain: `remove()` takes those)."""
        try:
            for directory in self.directories:
                if (directory / leaf).exists():
                    (directory / leaf).rmdir()
        except OSError:
            return False
        return True

    def remove(self) -> None:
        """Kill what is left and remove the sandbox's cgroups, depth first: a cgroup
        made below a leaf (by whatever means) goes, with what runs in it, before its
        parent. Raises `SandboxCleanupError` for what still cannot be removed."""
        self.kill("")
        deadline = time.monotonic() + KILL_DEADLINE_SEC
        for directory in self.directories:
            for cgroup in reversed(_subtree(directory)):
                while cgroup.exists():
                    try:
                        cgroup.rmdir()
                    except OSError as error:
                        if time.monotonic() > deadline:
                            raise SandboxCleanupError(
                                f"could not remove sandbox cgroup {cgroup}: {error.strerror}"
                            ) from None
                        time.sleep(0.01)

    def set_aside(self, prefix: str) -> list[Path]:
        """Rename the sandbox's cgroups to `<prefix><name>` beside themselves (a cgroup
        can only be renamed within its parent); returns the new directories. The limits
        stay on them, so whatever still runs there stays bounded."""
        moved = []
        for directory in self.directories:
            if directory.exists():
                target = directory.with_name(f"{prefix}{self.name}")
                directory.rename(target)
                moved.append(target)
        return moved


def _subtree(root: Path) -> list[Path]:
    """`root` and every cgroup below it, parents before children."""
    if not root.is_dir():
        return []
    found = [root]
    for directory, subdirectories, _ in os.walk(root):
        found += [Path(directory, name) for name in subdirectories]
    return found


def _enable_controllers(directory: Path) -> None:
    enabled = (directory / "cgroup.subtree_control").read_text().split()
    missing = [name for name in CONTROLLERS if name not in enabled]
    if missing:
        _write(directory / "cgroup.subtree_control", " ".join(f"+{name}" for name in missing))


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _write_if_present(path: Path, value: str) -> None:
    if path.exists():
        _write(path, value)
