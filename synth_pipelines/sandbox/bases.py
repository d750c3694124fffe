"""The base images the local image builder can make offline, from Debian's archive.

No image registry is reachable from an offline host, so a `FROM` is honoured only
where the same system can be made from the Debian archive with `mmdebstrap`:
Debian's own images (`debian:bookworm`, `debian:trixie` and their numbered and
`-slim` tags) and the Debian-based `python:3.X-slim` images whose Python is the
suite's (3.11 in bookworm, 3.13 in trixie). Those are made as a minbase system with
the suite's `python3`, `python3-pip` and `python3-venv`, `python`/`pip` links beside
them and pip allowed to install system-wide, as the official images allow; unlike
them, Python lives in `/usr/bin`, not `/usr/local/bin`. Anything else (Ubuntu,
Alpine, an image of a registry, a digest) is refused with the list of what is
available.

Each base is built once per image cache into `bases/<key>.tar` (root-owned, what
`docker import` takes; the key hashes the suite, the packages and the recipe)
and unpacked into the base layer of the layer store with its
owners shifted into the sandbox's user namespace (`userns.py`), so root inside a
sandbox owns what root owns in the image. The host's extra TLS roots
(`/usr/local/share/ca-certificates/`) are copied in: registries reached through an
intercepting proxy stay trusted by apt and pip inside.
"""

from __future__ import annotations

import asyncio
import hashlib
import shlex
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from synth_pipelines.sandbox.errors import SandboxStartError, UnsupportedTaskError
from synth_pipelines.sandbox.launcher import COMMAND_UMASK
from synth_pipelines.sandbox.layers import Layer, LayerStore
from synth_pipelines.sandbox.userns import host_id

DEFAULT_MIRROR = "http://deb.debian.org/debian"
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
PYTHON_PACKAGES = ("python3", "python3-pip", "python3-venv")
# Bumped whenever what a base holds changes, so every layer above it is rebuilt.
RECIPE_VERSION = "1"
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
_PYTHON_HOOKS = (
    'ln -sf python3 "$1/usr/bin/python"',
    'ln -sf pip3 "$1/usr/bin/pip"',
    'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
)
_HOOKS = (
    # A Docker image's apt keeps no downloaded packages; the same file as Docker's.
    "printf '%s\\n' 'DPkg::Post-Invoke { \"rm -f /var/cache/apt/archives/*.deb || true\"; };' "
    '> "$1/etc/apt/apt.conf.d/docker-clean"',
    # No resolver: a build step reaches the registries by name, through its proxy.
    ': > "$1/etc/resolv.conf"',
    "printf '127.0.0.1 localhost\\n::1 localhost ip6-localhost ip6-loopback\\n' > \"$1/etc/hosts\"",
    'echo sandbox > "$1/etc/hostname"',
)


@dataclass(frozen=True)
class BaseImage:
    """What one `FROM` reference is made of."""

    name: str
    suite: str
    python: bool
    # Packages beyond a task base's, for a system that is not a task's `FROM` (the
    # platform's own image, `services/project_image.py`).
    extra: tuple[str, ...] = ()

    @property
    def packages(self) -> tuple[str, ...]:
        return ("ca-certificates", *(PYTHON_PACKAGES if self.python else ()), *self.extra)

    @property
    def key(self) -> str:
        text = f"base\0{RECIPE_VERSION}\0{self.suite}\0{','.join(self.packages)}"
        return hashlib.sha256(text.encode()).hexdigest()


def _known() -> dict[str, BaseImage]:
    bases: dict[str, BaseImage] = {}
    for suite, number, python in (("bookworm", "12", "3.11"), ("trixie", "13", "3.13")):
        debian = BaseImage(f"debian:{suite}", suite, python=False)
        for tag in (suite, number, f"{suite}-slim", f"{number}-slim"):
            bases[f"debian:{tag}"] = debian
        image = BaseImage(f"python:{python}-slim", suite, python=True)
        for tag in (f"{python}-slim", f"{python}-slim-{suite}"):
            bases[f"python:{tag}"] = image
    return bases


KNOWN_BASES = _known()


def available() -> str:
    return ", ".join(sorted(KNOWN_BASES))


def resolve_base(reference: str, *, task: str) -> BaseImage:
    """The base a `FROM` names, or a refusal naming it and what can be built here."""
    name = reference.removeprefix("docker.io/").removeprefix("library/")
    if "@" in name:
        raise UnsupportedTaskError(
            task,
            f"FROM {reference}: an image pinned by digest cannot be fetched offline "
            f"(the local builder makes these bases from Debian's archive: {available()})",
        )
    if ":" not in name.rpartition("/")[2]:
        name = f"{name}:latest"
    found = KNOWN_BASES.get(name)
    if found is None:
        raise UnsupportedTaskError(
            task,
            f"FROM {reference} cannot be built here: no image registry is reachable and "
            f"the local builder makes only these bases from Debian's archive: {available()}",
        )
    return found


Progress = Callable[[str], None]


class BaseImages:
    """Bases built with mmdebstrap under `root`, and their layers in `store`."""

    def __init__(self, root: Path, store: LayerStore, mirror: str = DEFAULT_MIRROR):
        self.root = root
        self.store = store
        self.mirror = mirror

    def tarball_path(self, base: BaseImage) -> Path:
        return self.root / "bases" / f"{base.key[:16]}.tar"

    async def tarball(self, base: BaseImage, progress: Progress | None = None) -> Path:
        """The base's root filesystem as a root-owned tarball, built once."""
        path = self.tarball_path(base)
        async with self.store.exclusive(f"base-{base.key[:16]}"):
            if not path.exists():
                await self._debootstrap(base, path, progress)
        return path

    async def layer(self, base: BaseImage, progress: Progress | None = None) -> Layer:
        """The base's layer, shifted into the sandbox's ids; built once."""

        async def unpack(diff: Path) -> None:
            tarball = await self.tarball(base, progress)
            if progress is not None:
                progress(f"unpacking {base.name} into the layer store")
            await asyncio.to_thread(unpack_shifted, tarball, diff)

        return await self.store.build(
            base.key, parent=None, description=f"FROM {base.name}", make=unpack
        )

    async def _debootstrap(self, base: BaseImage, path: Path, progress: Progress | None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        pending = path.with_suffix(".partial.tar")
        hooks = [*_HOOKS, *(_PYTHON_HOOKS if base.python else ())]
        ca_files = sorted(HOST_CA_DIR.glob("**/*.crt")) if HOST_CA_DIR.is_dir() else []
        arguments = [
            "mmdebstrap",
            "--variant=minbase",
            "--mode=root",
            "--format=tar",
            f"--include={','.join(base.packages)}",
        ]
        if ca_files:
            arguments.append(f'--customize-hook=mkdir -p "$1{HOST_CA_DIR}"')
            arguments += [
                f"--customize-hook=copy-in {shlex.quote(str(ca))} {HOST_CA_DIR}" for ca in ca_files
            ]
            arguments.append('--customize-hook=chroot "$1" update-ca-certificates --fresh')
        arguments += [f"--customize-hook={hook}" for hook in hooks]
        arguments += [base.suite, str(pending), self.mirror]
        if progress is not None:
            progress(f"building base {base.name} from Debian {base.suite} with mmdebstrap")
        try:
            process = await asyncio.create_subprocess_exec(
                *arguments,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                # The base's files are the image's, for its every user: a container's
                # umask, not the controller's owner-only one.
                umask=COMMAND_UMASK,
            )
        except FileNotFoundError:
            raise SandboxStartError(
                "building an image needs mmdebstrap on the host (apt-get install mmdebstrap; "
                "`make setup` installs it)"
            ) from None
        assert process.stdout is not None
        tail: list[str] = []
        async for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip()
            tail = [*tail[-19:], line]
            if progress is not None and line.startswith("I: "):
                progress(line[3:])
        if await process.wait() != 0:
            pending.unlink(missing_ok=True)
            raise SandboxStartError(
                f"mmdebstrap could not build {base.name} from {self.mirror} "
                f"(exit {process.returncode}):\n" + "\n".join(tail)
            )
        pending.rename(path)


def unpack_shifted(tarball: Path, target: Path) -> None:
    """Extract `tarball` into `target` with every owner moved to its sandbox id.

    Device nodes are left out: a sandbox gets its own minimal `/dev`.
    """

    def shifted(member: tarfile.TarInfo, _destination: str) -> tarfile.TarInfo | None:
        if member.isdev():
            return None
        return member.replace(
            uid=host_id(member.uid), gid=host_id(member.gid), uname="", gname="", deep=False
        )

    with tarfile.open(tarball) as archive:
        archive.extractall(target, numeric_owner=True, filter=shifted)
