"""The sandbox's user namespace: every id inside is an unprivileged id outside.

Root inside a sandbox is host uid `HOST_ID_BASE`, and ids 0-65534 inside map to the
65535 host ids from there; host root (and every other host id) is not mapped at all,
so it shows as `nobody` inside and no process in the sandbox can act as it. The kernel
therefore refuses what only host root may do, whatever a process inside attempts:
writing `/proc/sys` (no sysctl is writable by a uid other than host root, beyond the
sandbox's own network namespace), `/proc/sysrq-trigger`, host-owned files.

The range starts at 0x70000000, in the block systemd documents as unused (above its
container range, below its "foreign" range): no host account or container tool
allocates ids there.

The last id inside, `SETUP_ID`, is the sandbox's own: it maps to the host id that owns
the namespace, one per live sandbox (`namespace_owner.py`), so that the kernel's
per-user counts, which a namespace's owner is charged for, are each sandbox's own.

The namespace is made before bubblewrap starts, by a short-lived `unshare --user`
helper whose uid and gid maps the controller writes (host root may map any range),
and bubblewrap is handed it with `--userns`. bubblewrap cannot write a range map of
its own, and with `--userns-block-fd` it would set the sandbox up as host root, which
the range does not map (the kernel refuses to create its files, EOVERFLOW). Instead
bubblewrap runs as the sandbox's owner id throughout (`SETUP_ID` inside): it lays the
sandbox out as that id and runs the init as it, an id no command runs as, so no
process of the sandbox can signal or trace its pid 1. The helper runs as that id too,
so that the namespace is its own and bubblewrap, unprivileged on the host, may enter
it; and because bubblewrap's outer process and the init share the id, the kernel lets
the init's parent-death signal through when the controller dies.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from synth_pipelines.sandbox.errors import SandboxStartError, SandboxUserError

HOST_ID_BASE = 0x7000_0000
ID_COUNT = 65536
SETUP_ID = ID_COUNT - 1
"""The id bubblewrap sets up the sandbox as, and its init runs as (65535: the 16-bit
"-1", which no account uses); on the host, the sandbox's owner id."""
HELPER_SCRIPT = "echo; read _"


def host_id(inside: int) -> int:
    """The host uid (or gid) that `inside` is within every sandbox; for `SETUP_ID`, whose
    host id is each sandbox's owner, one that no sandbox maps (a file an image gives to
    65535, which no Debian account owns, shows as `nobody` inside)."""
    if not 0 <= inside < ID_COUNT:
        raise SandboxUserError(
            f"id {inside} cannot exist in the sandbox, whose user namespace maps ids "
            f"0-{ID_COUNT - 1}; use a uid below {ID_COUNT}"
        )
    return HOST_ID_BASE + inside


@dataclass
class UserNamespace:
    """An open user namespace with the sandbox's id maps, ready for `bwrap --userns`."""

    fd: int

    @classmethod
    async def create(cls, unshare: str, owner: int) -> UserNamespace:
        """A new namespace owned by host id `owner`, which `SETUP_ID` maps to."""
        helper = await asyncio.create_subprocess_exec(
            unshare,
            "--user",
            "/bin/sh",
            "-c",
            HELPER_SCRIPT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            user=owner,
            group=owner,
            extra_groups=[],
        )
        assert helper.stdin is not None and helper.stdout is not None
        try:
            # The helper prints once it runs in the new namespace.
            if await helper.stdout.readline() != b"\n":
                raise SandboxStartError(
                    "could not create the sandbox's user namespace with `unshare --user`: "
                    f"{await _stderr(helper)}; the host must allow user namespaces "
                    "(user.max_user_namespaces > 0)"
                )
            await asyncio.to_thread(_write_maps, helper.pid, id_map(owner))
            return cls(os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC))
        finally:
            helper.stdin.close()
            await helper.wait()

    def close(self) -> None:
        os.close(self.fd)


def id_map(owner: int) -> str:
    """The uid and gid map of a sandbox whose namespace `owner` owns: the shared range,
    whose host ids an image's files keep from one sandbox to the next, then the
    sandbox's own id."""
    return f"0 {HOST_ID_BASE} {SETUP_ID}\n{SETUP_ID} {owner} 1\n"


def _write_maps(pid: int, mapping: str) -> None:
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as written:
            written.write(mapping)


async def _stderr(process: asyncio.subprocess.Process) -> str:
    assert process.stderr is not None
    return (await process.stderr.read()).decode(errors="replace").strip() or "no message"
