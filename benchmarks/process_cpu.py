"""CPU time spent by process trees, which on a shared host is steadier than wall time.

A process's `cutime`/`cstime` hold the CPU of the children it has reaped, so the CPU of a
live tree (each process's own plus what it reaped) includes every process that ever ran
under it and has been waited for.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

TICKS_PER_SEC = os.sysconf("SC_CLK_TCK")


def _own_and_reaped_sec(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    # Fields after the command: state is [0]; utime, stime, cutime, cstime are [11:15].
    return sum(int(value) for value in fields[11:15]) / TICKS_PER_SEC


def tree_cpu_sec(roots: list[int]) -> float:
    """CPU seconds of the processes under `roots`, and of every child they reaped."""
    pids = set()
    for pid in roots:
        try:
            root = psutil.Process(pid)
            pids |= {root.pid, *(child.pid for child in root.children(recursive=True))}
        except psutil.NoSuchProcess:
            continue
    return sum(_own_and_reaped_sec(pid) for pid in pids)


def own_cpu_sec() -> float:
    """CPU seconds of this process and of the children it has reaped."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system
