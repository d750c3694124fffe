"""Keep the memory of freed tensors in the process instead of giving it back at once.

Scoring rows against Qwen3's 151,936-token vocabulary makes tensors of tens to hundreds of
megabytes on every call. glibc serves each allocation over its mmap threshold (at most
32 MiB) with a fresh `mmap` and returns it with `munmap` on free, so every such tensor is
faulted in and zeroed page by page again: on 2 cores that was over a third of a training
step's wall time, spent in the kernel. Served from the heap and not trimmed, the same
pages are reused.
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_KEEP_UP_TO_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Serve every allocation from the heap and trim it only past 1 GiB of free space;
    call once at the start of a process that runs a model. False where the C library is
    not glibc (nothing changes there)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEEP_UP_TO_BYTES))
