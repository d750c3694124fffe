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
