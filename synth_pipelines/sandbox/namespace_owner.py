"""The host id that owns one sandbox's user namespace, its own while the sandbox lives.

The kernel charges much of what a process creates to a per-user count: inotify
instances and watches, POSIX message-queue bytes, queued signals, locked shared memory,
processes. Inside a user namespace, each is charged to the process's id there and
then, one level up, to the host id that created (owns) the namespace, against the
host's per-user limit (`/proc/sys/user/max_inotify_instances`, or the owner's rlimit
when the namespace was made). Were every sandbox's namespace owned by one host id, all
of them would draw on one budget: one attempt holding 128 inotify instances would
leave none to every other sandbox on the host. So each sandbox's namespace is owned
by a host id of its own, and each sandbox has, and is held to, one user's budget.

The ids are `OWNER_ID_BASE` + a slot, just above the ids inside sandboxes
(`userns.HOST_ID_BASE`), in the block systemd documents as unused. A slot is taken by
an exclusive `flock` on its file in `SLOTS_DIR`, held until the sandbox has ended:
the counts are host-wide, so the slots are too, whichever process or state directory
starts the sandbox, and the kernel drops the lock of a process that dies (its
sandboxes die with it).
"""

from __future__ import annotations

import fcntl
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from synth_pipelines.sandbox.errors import SandboxStartError
from synth_pipelines.sandbox.userns import HOST_ID_BASE, ID_COUNT

OWNER_ID_BASE = HOST_ID_BASE + ID_COUNT
SLOT_COUNT = 65536
SLOTS_DIR = Path("/run/synth-sandbox-owners")


@dataclass
class NamespaceOwner:
    """A host id no other live sandbox owns, and the locked slot file that reserves it."""

    id: int
    descriptor: int

    @classmethod
    def take(cls) -> NamespaceOwner:
        """The lowest free owner id, reserved until `release`."""
        _prepare_slots_dir()
        for slot in range(SLOT_COUNT):
            descriptor = os.open(
                SLOTS_DIR / str(slot), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
            )
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                continue
            return cls(OWNER_ID_BASE + slot, descriptor)
        raise SandboxStartError(
            f"all {SLOT_COUNT} user namespace owner ids are taken by running sandboxes "
            f"(locks in {SLOTS_DIR}); stop some before starting another"
        )

    def release(self) -> None:
        """Free the id for another sandbox; only once nothing of this sandbox runs, or
        its charges would count against the next one's budget."""
        if self.descriptor >= 0:
            os.close(self.descriptor)
            self.descriptor = -1


def _prepare_slots_dir() -> None:
    SLOTS_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = SLOTS_DIR.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != 0 or found.st_mode & 0o077:
        raise SandboxStartError(
            f"{SLOTS_DIR} must be a directory owned by root that only root may use "
            f"(mode 0700); remove it and start again"
        )
