"""One process at a time: a lock file that names the process holding it.

The capture proxy holds one beside its sandbox socket while it serves
(`proxy/sandbox_listener.py`), and the service supervisor one per service while it
starts or stops it (`services/supervisor.py`): a second process refuses, naming the
first, instead of replacing what the first one runs.

A POSIX record lock (`lockf`): it ends with its process however that ends, so a killed
holder leaves nothing that stops the next; a forked child does not inherit it. It is
held per process: two holders inside one process are not told apart.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def pid_lock(path: Path, refused: Callable[[str], Exception]) -> Iterator[None]:
    """Hold the lock at `path` (made 0600), with this process's pid written in it; while
    another process holds it, raise `refused(its pid)` (its pid as it wrote it, or
    "unknown") and touch nothing."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
            raise refused(holder) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(descriptor)
