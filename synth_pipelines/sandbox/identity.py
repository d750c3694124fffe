"""Who a command runs as: ids of the sandbox's user namespace, HOME, and capabilities.

Each root looks a Harbor user up its own way (the host's `/etc/passwd`, which the
host root shares, or the image's, read inside the sandbox); both end in `mapped`,
which refuses what no command may run as.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from synth_pipelines.sandbox.errors import SandboxUserError
from synth_pipelines.sandbox.userns import SETUP_ID, host_id

ROOT_HOME = PurePosixPath("/root")
# Also HOME of every user but root: the host root has no home directories to give, and
# an image's user may name none.
TMP_DIR = PurePosixPath("/tmp")


@dataclass(frozen=True)
class Identity:
    """uid and gid inside the sandbox, HOME, and the capabilities the command keeps."""

    uid: int
    gid: int
    home: str
    capabilities: tuple[int, ...] = ()


ROOT = Identity(0, 0, str(ROOT_HOME))

# What root on an image may do beyond a plain user: act on any file of the sandbox
# (an image's files keep the owners its archives had, e.g. a project's sdist made by
# uid 501, and Docker's root may edit them). In the sandbox's user namespace these
# reach only inodes whose owners it maps, never a host file; no capability to mount,
# change users, signal or administer anything is given. CAP_CHOWN, CAP_DAC_OVERRIDE,
# CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID.
FILE_CAPABILITIES = (0, 1, 2, 3, 4)
FILE_ROOT = Identity(0, 0, str(ROOT_HOME), FILE_CAPABILITIES)
"""Root over the sandbox's files: an image's root, and the sandbox's own resets, which
no file mode the agent sets may stop."""


def is_root(user: str | int | None) -> bool:
    """Whether a Harbor user means root (no user at all does)."""
    return user is None or user in ("root", 0, "0")


def mapped(identity: Identity) -> Identity:
    """`identity`, once its ids are known to be ones a command may take: mapped by the
    sandbox's user namespace, and not the setup id its init runs as."""
    for inside in (identity.uid, identity.gid):
        host_id(inside)  # refuses an id the sandbox's user namespace does not map
    if identity.uid == SETUP_ID:
        raise SandboxUserError(
            f"uid {SETUP_ID} is the sandbox's own (its init runs as it); use another uid"
        )
    return identity
