"""Memory of the platform's processes, read from `/proc/<pid>/status`.

Each process is named by its role (model service, proxy, Dagster daemon, webserver, code
server, run worker) from its command line, so a run worker that starts and ends between
two samples is still counted under its role.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROLES = (
    ("run worker", ("api execute_run", "api execute_step")),
    ("dagster daemon", ("dagster-daemon",)),
    ("dagster webserver", ("dagster-webserver",)),
    ("code server", ("api grpc", "code-server")),
    ("model service", ("model serve",)),
    ("proxy", ("proxy serve",)),
)
"""Roles by a fragment of the command line; the first that matches wins."""


def role_of(cmdline: list[str], parent_role: str | None) -> str | None:
    """A process's role. Dagster's code server starts each run worker as a multiprocessing
    child; other multiprocessing children (the proxy's render workers, a run worker's step
    processes) are named after their parent, so their memory is not lost."""
    line = " ".join(cmdline)
    for role, fragments in ROLES:
        if any(fragment in line for fragment in fragments):
            return role
    if parent_role is None or "multiprocessing.spawn" not in line:
        return None
    return "run worker" if parent_role == "code server" else f"{parent_role} subprocess"


def status_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) in KiB, or None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    if len(values) < 2:
        return None
    return values["VmRSS"], values["VmHWM"]


@dataclass
class MemoryWatch:
    """Peak RSS per role since the last `window()` and since the start."""

    roots: list[int]
    window_peak_kib: dict[str, int] = field(default_factory=dict)
    run_peak_kib: dict[str, int] = field(default_factory=dict)

    def _roles(self) -> dict[int, str]:
        """The role of every process under the roots, parents before children."""
        roles: dict[int, str] = {}
        pending = [(pid, None) for pid in self.roots]
        while pending:
            pid, parent_role = pending.pop()
            try:
                process = psutil.Process(pid)
                role = role_of(process.cmdline(), parent_role)
                children = process.children()
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
            if role is not None:
                roles[pid] = role
            pending += [(child.pid, role) for child in children]
        return roles

    def sample(self) -> None:
        for pid, role in self._roles().items():
            kib = status_kib(pid)
            if kib is None:
                continue
            peak = kib[1]
            self.window_peak_kib[role] = max(self.window_peak_kib.get(role, 0), peak)
            self.run_peak_kib[role] = max(self.run_peak_kib.get(role, 0), peak)

    def window(self) -> dict[str, int]:
        """The peaks since the previous window, and start a new one."""
        peaks, self.window_peak_kib = self.window_peak_kib, {}
        return peaks
