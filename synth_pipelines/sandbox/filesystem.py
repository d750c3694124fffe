"""The filesystem a sandbox sees, and the host directories behind it.

Inside: the host's system directories read-only (standing in for the base image),
only the `/etc` entries programs need, a fresh `/proc` whose entries that reach host
state are read-only, a minimal `/dev`, and one writable host directory per top-level
path the task and Harbor use (`/app`, `/logs`, `/tests`, `/solution`, `/tmp`,
`/root`, ...). Everything else, including `/` itself, is read-only, and nothing of
the operator's home, the project checkout or other sandboxes is mounted.

bubblewrap mounts what everyone may read and leaves mountpoints for the rest, which
the controller binds in after the init starts (`attach.py`). The writable
directories, and every file laid down in them, belong to ids of the sandbox's user
namespace (`userns.py`): root inside owns them, as it owns an image's files. The
directories the host makes for them are mode 0755, as Docker makes a `WORKDIR` or a
`COPY`'s missing parents, whatever the controller's umask: the platform's own is
owner-only (`state_locations.py`), and the task's other users must enter them.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from synth_pipelines.contracts.build_context import resolve_source
from synth_pipelines.sandbox.dockerfile import CopyStep, DockerfileRecipe
from synth_pipelines.sandbox.errors import UnsupportedTaskError
from synth_pipelines.sandbox.userns import host_id

HOST_SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Only what programs read to run: users, name service, dynamic linker, locale and
# time zone, TLS roots, shells' profiles, Debian's alternatives symlinks. Secrets
# (shadow), package credentials (pip.conf, npmrc) and host identity stay out.
ETC_ENTRIES = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "group",
    "host.conf",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "login.defs",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "pki",
    "profile",
    "profile.d",
    "protocols",
    "services",
    "ssl",
    "terminfo",
    "timezone",
)
# Kernel interfaces under /proc that reach the host rather than the sandbox (sysctls,
# the magic SysRq key, interrupt routing, bus and filesystem settings), made
# read-only as Docker does. Writes there are refused by the kernel already, because
# no id inside is host root; the read-only mount says so before the kernel has to.
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
KERNEL_DIRS = ("proc", "dev", "sys", "etc", "run", "boot")
RESERVED_TOPS = frozenset((*HOST_SYSTEM_DIRS, *KERNEL_DIRS))
DIRECTORY_MODE = 0o755


@dataclass(frozen=True)
class Bind:
    source: Path
    target: PurePosixPath
    read_only: bool = False


def top_level(path: PurePosixPath) -> str:
    """The first component of an absolute sandbox path (`/app/x` -> `app`)."""
    return path.parts[1] if len(path.parts) > 1 else ""


def writable_top(path: PurePosixPath, *, task: str, why: str) -> str:
    """The writable top-level directory holding `path`, or a refusal naming it."""
    top = top_level(path)
    if not path.is_absolute() or not top:
        raise UnsupportedTaskError(task, f"{why} {str(path)!r} is not an absolute path")
    if top in RESERVED_TOPS:
        raise UnsupportedTaskError(
            task,
            f"{why} {str(path)!r} lies in /{top}, which the sandbox takes read-only "
            "from the host; use /app or another directory of your own",
        )
    return top


class SandboxFilesystem:
    """Host directories under `root`, one per writable top-level sandbox path."""

    def __init__(self, root: Path, writable_tops: Iterable[str], binds: Iterable[Bind]):
        self.root = root
        self.writable_tops = tuple(sorted(set(writable_tops)))
        self.binds = tuple(sorted(binds, key=lambda bind: len(bind.target.parts)))

    @property
    def writable_root(self) -> Path:
        """The host directory holding every writable top-level directory."""
        return self.root / "fs"

    def host_dir(self, top: str) -> Path:
        return self.writable_root / top

    def host_path(self, path: PurePosixPath) -> Path:
        """Where a sandbox path under a writable top lives on the host."""
        top = top_level(path)
        if top not in self.writable_tops:
            raise ValueError(f"{str(path)!r} is not under a writable sandbox directory")
        return self.host_dir(top).joinpath(*path.parts[2:])

    def create(self) -> None:
        """The writable directories and the mountpoints of binds that land in one of
        them, all root's inside; a writable bind's own directory becomes root's inside
        too (not what it holds), or root inside could not write there."""
        self.writable_root.mkdir(parents=True, exist_ok=True)
        for top in self.writable_tops:
            make_directories(self.host_dir(top))
        if "tmp" in self.writable_tops:
            self.host_dir("tmp").chmod(0o1777)
        for bind in self.binds:
            if not bind.read_only:
                make_bind_directory(bind.source)
                _own(bind.source, 0, 0)
            if top_level(bind.target) in self.writable_tops:
                _make_mountpoint(self.host_path(bind.target), bind.source.is_dir())
        for top in self.writable_tops:
            _own_tree(self.host_dir(top))

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        if self.root.exists():
            raise OSError(f"could not remove sandbox directory {self.root}")

    def bwrap_arguments(self) -> list[str]:
        """What bubblewrap mounts: system directories, `/etc` entries, `/proc` and
        `/dev`, and an empty mountpoint (mode 0755) for each of `attachments()`."""
        arguments: list[str] = []
        for name in HOST_SYSTEM_DIRS:
            arguments += _host_entry(Path("/") / name)
        arguments += _directories([PurePosixPath("/etc")])
        for name in ETC_ENTRIES:
            arguments += _host_entry(Path("/etc") / name)
        arguments += ["--proc", "/proc", "--dev", "/dev"]
        for name in PROC_READ_ONLY:
            arguments += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
        arguments += _directories([PurePosixPath("/", top) for top in self.writable_tops])
        for bind in self.binds:
            if top_level(bind.target) in self.writable_tops:
                continue
            if bind.source.is_dir():
                arguments += _directories([bind.target])
            else:
                # A file mountpoint: bubblewrap makes one by binding /dev/null there.
                arguments += _directories([bind.target.parent])
                arguments += ["--ro-bind", "/dev/null", str(bind.target)]
        return [*arguments, "--remount-ro", "/"]

    def attachments(self) -> list[tuple[Path, PurePosixPath, bool]]:
        """(host source, sandbox target, read-only) for the controller to bind in once
        the init runs, parents before children."""
        tops = [(self.host_dir(top), PurePosixPath("/", top), False) for top in self.writable_tops]
        return [*tops, *((bind.source, bind.target, bind.read_only) for bind in self.binds)]

    def lay_down(self, recipe: DockerfileRecipe, context: Path) -> None:
        """Reproduce the recipe's WORKDIR and COPY/ADD steps in the host directories."""
        for workdir in recipe.workdirs:
            make_directories(self.host_path(workdir))
        for step in recipe.copies:
            for source in resolve_sources(step, context):
                self._copy(step, source)
        for top in self.writable_tops:
            _own_tree(self.host_dir(top))

    def copy_into(self, source_dir: Path, target: PurePosixPath) -> None:
        destination = self.host_path(target)
        make_directories(destination.parent)
        shutil.copytree(source_dir, destination, symlinks=True, dirs_exist_ok=True)
        _own_tree(destination)

    def _copy(self, step: CopyStep, source: Path) -> None:
        destination = self.host_path(step.destination)
        into_dir = step.destination_is_dir or destination.is_dir()
        if source.is_dir() and not source.is_symlink():
            make_directories(destination.parent)
            shutil.copytree(source, destination, symlinks=True, dirs_exist_ok=True)
            written = [destination]
        elif step.extract_archives and tarfile.is_tarfile(source):
            make_directories(destination)
            _extract(source, destination)
            written = [destination]
        else:
            target = destination / source.name if into_dir else destination
            make_directories(target.parent)
            shutil.copy2(source, target, follow_symlinks=False)
            written = [target]
        for path in written:
            _apply_ownership(path, step)


def make_directories(path: Path) -> None:
    """`path` and its missing parents, each mode 0755 whatever the umask: a directory
    the host makes in a sandbox's filesystem (a `WORKDIR`, a `COPY`'s parents, a
    bind's own directory)."""
    missing = [directory for directory in (path, *path.parents) if not directory.exists()]
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        directory.chmod(DIRECTORY_MODE)


def make_bind_directory(source: Path) -> None:
    """A writable bind's host directory: its parents are the host's (made with the
    controller's umask), the directory itself is the sandbox's (0755)."""
    source.parent.mkdir(parents=True, exist_ok=True)
    make_directories(source)


def _extract(archive_path: Path, destination: Path) -> None:
    """`ADD` of a local tar archive: its members keep their modes; a directory the
    archive implies without listing it is made 0755, as Docker makes it."""
    with tarfile.open(archive_path) as archive:
        # As the data filter extracts them: an absolute name below the destination.
        names = {member.name.lstrip("/"): member for member in archive.getmembers()}
        listed = {PurePosixPath(name) for name, member in names.items() if member.isdir()}
        implied = {
            parent
            for name in names
            for parent in PurePosixPath(name).parents
            if parent != PurePosixPath(".") and parent not in listed
        }
        made = [path for path in implied if not (destination / path).exists()]
        archive.extractall(destination, filter="data")
    root = destination.resolve()
    for path in made:
        directory = (destination / path).resolve()
        # The data filter keeps links inside `destination`; a link it made may still
        # stand where a directory was implied, so only a real directory in it changes.
        if directory.is_relative_to(root) and directory.is_dir():
            directory.chmod(DIRECTORY_MODE)


def resolve_sources(step: CopyStep, context: Path) -> list[Path]:
    """The context files a COPY/ADD names, refusing any that escape the context."""
    return [
        path for pattern in step.sources for path in resolve_source(pattern, step.line, context)
    ]


def _host_entry(path: Path) -> list[str]:
    if path.is_symlink():
        return ["--symlink", os.readlink(path), str(path)]
    if path.exists():
        return ["--ro-bind", str(path), str(path)]
    return []


def _apply_ownership(path: Path, step: CopyStep) -> None:
    if step.chmod is None and step.chown is None:
        return
    owner = _owner(step.chown) if step.chown is not None else None
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if item.is_symlink():
            continue
        if step.chmod is not None:
            item.chmod(step.chmod)
        if owner is not None:
            _own(item, *owner)


def _owner(spec: str) -> tuple[int, int]:
    user, _, group = spec.partition(":")
    uid = int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid
    if not group:
        return uid, uid if user.isdigit() else pwd.getpwnam(user).pw_gid
    return uid, int(group) if group.isdigit() else grp.getgrnam(group).gr_gid


def _make_mountpoint(path: Path, directory: bool) -> None:
    if directory:
        make_directories(path)
    else:
        make_directories(path.parent)
        path.touch(exist_ok=True)


def _own(path: Path, uid: int, gid: int) -> None:
    """Give `path` (not what a symlink names) to the sandbox's `uid` and `gid`."""
    os.chown(path, host_id(uid), host_id(gid), follow_symlinks=False)


def _own_tree(root: Path) -> None:
    """Give whatever under `root` the host created (owned by a host id, not one of the
    sandbox's) to root inside; `COPY --chown` owners are the sandbox's and stay."""
    entries = (
        Path(directory, name)
        for directory, subdirectories, files in os.walk(root)
        for name in [*subdirectories, *files]
    )
    for path in [root, *entries]:
        if path.lstat().st_uid < host_id(0):
            _own(path, 0, 0)


def _directories(paths: list[PurePosixPath]) -> list[str]:
    """bubblewrap arguments creating each path and its parents with mode 0755: the
    parents it creates on its own are mode 0700, closed to every id but the one it
    sets the sandbox up as."""
    wanted: dict[PurePosixPath, None] = {}
    for path in paths:
        for directory in [*reversed(path.parents), path]:
            if directory != PurePosixPath("/"):
                wanted[directory] = None
    arguments: list[str] = []
    for directory in wanted:
        arguments += ["--perms", "0755", "--dir", str(directory)]
    return arguments
