"""Building a task's Dockerfile into layers, without a container engine.

The base comes from `bases.py`; every `RUN`, `WORKDIR` and `COPY`/`ADD` step after it
becomes one layer of the layer store (`layers.py`), keyed by the parent layer's key,
the step's text, what it runs with (environment, user, working directory) and, for a
copy, the content of the files it copies. A step whose key is stored is not run
again, so every attempt of a task after the first, and its separate verifier, starts
from the cached layers; two attempts needing the same step build it once.

Each step runs in a build sandbox (`build_sandbox.py`) on its parent layers, within the
task's limits (`build_bounds.py`) and with no way out but the registry proxy
(`registry_proxy.py`). The limits and the proxy's hosts are not part of a layer's key:
they bound how a step runs, not what it writes, so a layer is found again whatever
limits the task that needs it has. A copy is packed into a tar stream on the host and
unpacked inside, so no path of the image is ever resolved on the host.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import shlex
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

from synth_pipelines.sandbox.bases import BASE_ENV, BaseImages, resolve_base
from synth_pipelines.sandbox.build_bounds import BuildLimitExceeded, BuildLimits, storage_left_mb
from synth_pipelines.sandbox.build_sandbox import BuildSandbox
from synth_pipelines.sandbox.commands import Completed
from synth_pipelines.sandbox.dockerfile import (
    CopyStep,
    DockerfileRecipe,
    RunStep,
    Step,
    UserStep,
    WorkdirStep,
)
from synth_pipelines.sandbox.errors import ImageBuildError
from synth_pipelines.sandbox.filesystem import resolve_sources
from synth_pipelines.sandbox.layers import Layer, LayerStore
from synth_pipelines.sandbox.registry_hosts import RegistryHosts

OUTPUT_TAIL_LINES = 20
STAGED = "staged"

Progress = Callable[[str], None]


class ImageCacheSettings(Protocol):
    """Where the image cache lives and how it builds, under the names the platform's
    settings and the bwrap environment's options both give them."""

    @property
    def images_dir(self) -> Path: ...

    @property
    def debian_mirror(self) -> str: ...

    @property
    def image_step_timeout_sec(self) -> float: ...

    @property
    def image_cache_mb(self) -> int: ...

    @property
    def image_registry_hosts(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class Image:
    """A built image: its layers (top first) and what a container of it runs with."""

    base: str
    layers: tuple[Layer, ...]
    env: dict[str, str]
    workdir: PurePosixPath | None
    user: str | None

    @property
    def key(self) -> str:
        return self.layers[0].key

    @property
    def size_bytes(self) -> int:
        return sum(layer.size_bytes for layer in self.layers)


def step_key(parent: str, step: Step, *, user: str, workdir: str, inputs: str) -> str:
    """The layer key of `step` on `parent`: everything that can change what it writes."""
    described: dict[str, object] = {
        "parent": parent,
        "kind": type(step).__name__,
        "text": step.text,
        "user": user,
        "workdir": workdir,
        "inputs": inputs,
    }
    if isinstance(step, RunStep):
        described["env"] = sorted(step.env.items())
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


@dataclass
class ImageBuilder:
    """Builds images under `root` (`<root>/bases`, `<root>/layers`)."""

    @classmethod
    def configured(
        cls, config: ImageCacheSettings, progress: Progress | None = None
    ) -> ImageBuilder:
        """The builder of the configured image cache, with its bound and limits, whose
        steps may reach the configured registries and the Debian mirror."""
        return cls(
            config.images_dir,
            mirror=config.debian_mirror,
            step_timeout_sec=config.image_step_timeout_sec,
            cache_bytes=config.image_cache_mb << 20,
            registries=RegistryHosts.of(config.image_registry_hosts, mirror=config.debian_mirror),
            progress=progress,
        )

    root: Path
    mirror: str
    step_timeout_sec: float
    cache_bytes: int
    registries: RegistryHosts
    progress: Progress | None = None
    built: int = field(default=0, init=False)
    cached: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.store = LayerStore(self.root / "layers")
        self.bases = BaseImages(self.root, self.store, self.mirror)

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)

    async def build(
        self, recipe: DockerfileRecipe, context: Path, *, task: str, limits: BuildLimits
    ) -> Image:
        """The image of `recipe`, its missing layers built within the task's `limits`."""
        base = resolve_base(recipe.base_image, task=task)
        layer = await self.bases.layer(base, self.progress)
        user, workdir = "root", "/"
        total = len(recipe.steps)
        for number, step in enumerate(recipe.steps, 1):
            label = f"step {number}/{total} `{step.text}`"
            if isinstance(step, UserStep):
                user = step.user
                continue
            if isinstance(step, WorkdirStep):
                workdir = str(step.path)
            inputs = (
                await asyncio.to_thread(_inputs_digest, step, context)
                if isinstance(step, CopyStep)
                else ""
            )
            key = step_key(layer.key, step, user=user, workdir=workdir, inputs=inputs)
            found = self.store.get(key)
            if found is not None:
                self.cached += 1
                self._say(f"{label}: cached")
                layer = found
                continue
            self._say(f"{label}: building")
            layer = await self.store.build(
                key,
                parent=layer,
                description=step.text,
                make=functools.partial(
                    self._execute,
                    step,
                    layer,
                    user=user,
                    workdir=workdir,
                    context=context,
                    task=task,
                    limits=limits,
                ),
            )
        chain = self.store.chain(layer)
        await asyncio.to_thread(self._prune_around, chain)
        return Image(
            base=base.name,
            layers=tuple(chain),
            env=dict(recipe.env),
            workdir=recipe.workdir,
            user=recipe.user,
        )

    def _prune_around(self, chain: list[Layer]) -> None:
        held = self.store.hold(chain)
        try:
            for removed in self.store.prune(self.cache_bytes):
                self._say(f"pruned layer {removed.key[:12]} ({removed.description})")
        finally:
            held.release()

    async def _execute(
        self,
        step: Step,
        parent: Layer,
        diff: Path,
        *,
        user: str,
        workdir: str,
        context: Path,
        task: str,
        limits: BuildLimits,
    ) -> None:
        chain = self.store.chain(parent)
        tail: list[str] = []

        def collect(line: str) -> None:
            tail.append(line)
            del tail[:-OUTPUT_TAIL_LINES]
            self._say(f"  {line}")

        try:
            # The layers above the base share the task's storage bound.
            used = sum(layer.size_bytes for layer in chain[:-1])
            storage_mb = await asyncio.to_thread(storage_left_mb, limits, used)
            async with BuildSandbox.open(
                self.store,
                [layer.diff for layer in chain],
                diff,
                limits=limits,
                registries=self.registries,
                storage_mb=storage_mb,
                on_line=collect,
            ) as sandbox:
                result = await self._step(
                    sandbox, step, user=user, workdir=workdir, context=context, task=task
                )
                if result.return_code != 0:
                    output = "\n".join(f"  {line}" for line in tail) or "  (no output)"
                    raise ImageBuildError(
                        f"Task {task!r}: the image build failed at Dockerfile line {step.line} "
                        f"`{step.text}` (exit {result.return_code}); its last output:\n{output}"
                    )
        except BuildLimitExceeded as exceeded:
            raise exceeded.error(
                task=task, step=f"at Dockerfile line {step.line} `{step.text}`"
            ) from None
        self.built += 1

    async def _step(
        self,
        sandbox: BuildSandbox,
        step: Step,
        *,
        user: str,
        workdir: str,
        context: Path,
        task: str,
    ) -> Completed:
        """Run `step` in its sandbox: a RUN as the image's user, a WORKDIR or copy as root."""
        if isinstance(step, RunStep):
            identity = await sandbox.identity(user, task=task)
            env = {"HOME": identity.home, **step.env}
            return await sandbox.run(
                step.command, env, identity, cwd=workdir, timeout_sec=self.step_timeout_sec
            )
        if isinstance(step, WorkdirStep):
            return await sandbox.run(
                f"mkdir -p {shlex.quote(str(step.path))}",
                BASE_ENV,
                sandbox.root,
                cwd="/",
                timeout_sec=self.step_timeout_sec,
            )
        if isinstance(step, CopyStep):
            return await self._copy(sandbox, step, context)
        raise TypeError(f"no layer is built for {step!r}")

    async def _copy(self, sandbox: BuildSandbox, step: CopyStep, context: Path) -> Completed:
        with tempfile.TemporaryFile(dir=self.store.scratch) as archive_file:
            single = await asyncio.to_thread(_pack_copy, step, context, archive_file)
            archive_file.seek(0)
            destination = shlex.quote(str(step.destination))
            if single is None:
                command = f"tar -xpf - --numeric-owner -C / && {_chown(step, destination)}"
            else:
                # One file to a destination not written as a directory: Docker copies
                # it into the destination if that is a directory in the image, else
                # to that path.
                name = shlex.quote(single)
                parent = shlex.quote(str(step.destination.parent))
                command = (
                    f"staging=$(mktemp -d) && tar -xpf - --numeric-owner -C $staging && "
                    f"if [ -d {destination} ]; then target={destination}/{name}; "
                    f"else mkdir -p {parent} && target={destination}; fi && "
                    f'mv -f $staging/{STAGED} "$target" && rmdir $staging && '
                    f"{_chown(step, chr(34) + '$target' + chr(34))}"
                )
            return await sandbox.run(
                command,
                BASE_ENV,
                sandbox.root,
                cwd="/",
                timeout_sec=self.step_timeout_sec,
                stdin_fd=archive_file.fileno(),
            )


def _chown(step: CopyStep, paths: str) -> str:
    if step.chown is None:
        return "true"
    return f"chown -R {shlex.quote(step.chown)} {paths}"


def _owned(member: tarfile.TarInfo, chmod: int | None) -> tarfile.TarInfo:
    member.uid = member.gid = 0
    member.uname = member.gname = "root"
    if chmod is not None and not member.issym():
        member.mode = chmod
    return member


def _pack_copy(step: CopyStep, context: Path, archive_file: BinaryIO) -> str | None:
    """Write the tar stream of a copy (paths from `/`); for one plain file to a
    destination that may be a directory in the image, the file alone under `STAGED`,
    and its name is returned."""
    sources = resolve_sources(step, context)
    root = str(step.destination).lstrip("/")
    with tarfile.open(fileobj=archive_file, mode="w") as archive:
        plain_file = (
            len(sources) == 1
            and not step.destination_is_dir
            and not sources[0].is_dir()
            and not (step.extract_archives and tarfile.is_tarfile(sources[0]))
        )
        if plain_file:
            archive.add(sources[0], arcname=STAGED, filter=lambda m: _owned(m, step.chmod))
            return sources[0].name
        for source in sources:
            if source.is_dir() and not source.is_symlink():
                for child in sorted(source.iterdir()):
                    archive.add(
                        child,
                        arcname=f"{root}/{child.name}" if root else child.name,
                        filter=lambda m: _owned(m, step.chmod),
                    )
            elif step.extract_archives and tarfile.is_tarfile(source):
                _add_extracted(archive, source, root)
            else:
                arcname = f"{root}/{source.name}" if root else source.name
                archive.add(source, arcname=arcname, filter=lambda m: _owned(m, step.chmod))
    return None


def _add_extracted(archive: tarfile.TarFile, source: Path, root: str) -> None:
    """ADD of a local archive: its members, made safe as Python's "data" filter does,
    under the destination."""
    with tarfile.open(source) as inner:
        for member in inner:
            safe = tarfile.data_filter(member, "/")
            renamed = safe.replace(name=f"{root}/{safe.name}" if root else safe.name, deep=False)
            content = inner.extractfile(member) if member.isfile() else None
            archive.addfile(renamed, content)


def _inputs_digest(step: CopyStep, context: Path) -> str:
    """The sha256 of every file a copy reads: names, modes, link targets, contents."""
    digest = hashlib.sha256()
    context = context.resolve()
    for source in resolve_sources(step, context):
        paths = [source, *sorted(source.rglob("*"))] if source.is_dir() else [source]
        for path in paths:
            found = path.lstat()
            digest.update(f"{path.relative_to(context)}\0{found.st_mode:o}\0".encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode())
            elif path.is_file():
                with path.open("rb") as content:
                    for chunk in iter(lambda: content.read(1 << 20), b""):
                        digest.update(chunk)
    return digest.hexdigest()
