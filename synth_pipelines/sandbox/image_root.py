"""A built image as a sandbox's root, with a fresh writable layer of its own.

For a Dockerfile with RUN or USER steps: the image is built into cached layers
(`image_build.py`), held while the sandbox runs, and overlay-mounted with an upper
layer on the sandbox's storage, discarded at teardown. Users are the image's, looked
up in its own `/etc/passwd` inside the sandbox, never through the host's view of its
files.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from harbor.models.trial.paths import EnvironmentPaths

from synth_pipelines.sandbox.bases import BASE_ENV, resolve_base
from synth_pipelines.sandbox.build_bounds import BuildLimits
from synth_pipelines.sandbox.commands import RunInside
from synth_pipelines.sandbox.dockerfile import DockerfileRecipe, read_dockerfile
from synth_pipelines.sandbox.errors import SandboxUserError, TaskDefinitionError
from synth_pipelines.sandbox.filesystem import (
    Bind,
    SandboxFilesystem,
    make_bind_directory,
    resolve_sources,
)
from synth_pipelines.sandbox.identity import (
    FILE_CAPABILITIES,
    FILE_ROOT,
    ROOT_HOME,
    TMP_DIR,
    Identity,
    is_root,
    mapped,
)
from synth_pipelines.sandbox.image_build import Image, ImageBuilder, ImageCacheSettings
from synth_pipelines.sandbox.image_mounts import image_bwrap_arguments, make_directory, make_file
from synth_pipelines.sandbox.layers import Held, LayerStore
from synth_pipelines.sandbox.leases import IMAGE_VIEW, image_root, verifier_mount, verifier_mounts
from synth_pipelines.sandbox.overlay import is_mounted, mount_overlay, mount_read_only, unmount
from synth_pipelines.sandbox.root import INSTALLED_AGENT_DIR, RootLayout
from synth_pipelines.sandbox.transfers import Transfers
from synth_pipelines.sandbox.userns import host_id


def image_recipe(
    first_read: DockerfileRecipe, dockerfile: Path, context: Path, *, task: str
) -> DockerfileRecipe:
    """The recipe read again against its base's environment, once its base (as first
    read) and every file it copies are known to be available."""
    resolve_base(first_read.base_image, task=task)
    recipe = read_dockerfile(dockerfile, task=task, base_env=BASE_ENV)
    for step in recipe.copies:
        try:
            resolve_sources(step, context)
        except (FileNotFoundError, PermissionError) as error:
            raise TaskDefinitionError(task, str(error)) from None
    return recipe


class ImageRoot:
    """The task's image, built or found in the cache, with a writable layer on top."""

    def __init__(
        self,
        recipe: DockerfileRecipe,
        context: Path,
        *,
        task: str,
        sandbox_dir: Path,
        binds: Iterable[Bind],
        paths: EnvironmentPaths,
        bundled_tests: bool,
        cache: ImageCacheSettings,
        limits: BuildLimits,
        run: RunInside,
        transfers: Transfers,
        logger: logging.Logger,
    ):
        self.recipe = recipe
        self.filesystem = SandboxFilesystem(sandbox_dir, (), binds)
        self.image: Image | None = None
        self._context = context
        self._task = task
        self._paths = paths
        self._bundled_tests = bundled_tests
        self._cache = cache
        self._limits = limits
        self._layers: LayerStore | None = None
        self._run = run
        self._transfers = transfers
        self._logger = logger
        self._held: Held | None = None
        self._identities: dict[str, Identity] = {}

    async def prepare(self) -> None:
        """Build (or find) the image, its steps within the task's limits, and hold its
        layers while the sandbox runs."""
        builder = ImageBuilder.configured(
            self._cache, progress=lambda line: self._logger.debug("image build: %s", line)
        )
        image = await builder.build(
            self.recipe, self._context, task=self._task, limits=self._limits
        )
        if builder.built:
            self._logger.info(
                "Built %d layer(s) of the image of %s (%d cached)",
                builder.built,
                self._task,
                builder.cached,
            )
        self._held = await asyncio.to_thread(builder.store.hold, list(image.layers))
        self._layers = builder.store
        self.image = image

    def lay_down(self) -> RootLayout:
        """Mount the image's layers with a fresh upper on the sandbox's storage, make
        Harbor's directories and the bind mountpoints in it; bubblewrap binds the
        mounted root through its descriptor."""
        assert self.image is not None and self._layers is not None, "prepare() comes first"
        writable = self.filesystem.writable_root
        upper, work = writable / "upper", writable / "work"
        upper.mkdir(parents=True, exist_ok=True)
        os.chown(upper, host_id(0), host_id(0))
        upper.chmod(0o755)
        root = mount_overlay(
            image_root(self.filesystem.root).name,
            [layer.diff for layer in self.image.layers],
            upper,
            work,
            relative_to=self._layers.root,
        )
        root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            paths = self._paths
            for directory in (
                paths.logs_dir,
                paths.tests_dir,
                paths.solution_dir,
                INSTALLED_AGENT_DIR,
                ROOT_HOME,
            ):
                make_directory(root_fd, PurePosixPath(directory))
            for bind in self.filesystem.binds:
                if not bind.read_only:
                    make_bind_directory(bind.source)
                    os.chown(bind.source, host_id(0), host_id(0))
                if bind.source.is_dir():
                    make_directory(root_fd, bind.target)
                else:
                    make_file(root_fd, bind.target)
        except BaseException:
            os.close(root_fd)
            raise
        return RootLayout(image_bwrap_arguments(root_fd), (root_fd,))

    def attachments(self) -> list[tuple[Path, PurePosixPath, bool]]:
        """Only the binds: the image's root is writable as a whole, its own upper."""
        return [(bind.source, bind.target, bind.read_only) for bind in self.filesystem.binds]

    async def finish_start(self) -> None:
        if self._bundled_tests:
            # Harbor skips uploading tests/, expecting the verifier image to hold them.
            await self._transfers.upload_dir(self._context, str(self._paths.tests_dir))

    async def identity(self, user: str | int | None) -> Identity:
        """The user, else the image's USER, looked up in the image's /etc/passwd;
        root keeps `FILE_CAPABILITIES`."""
        if user is None and self.image is not None:
            user = self.image.user
        if is_root(user):
            return FILE_ROOT
        name = str(user)
        if name not in self._identities:
            self._identities[name] = mapped(await self._looked_up(name))
        return self._identities[name]

    async def _looked_up(self, name: str) -> Identity:
        found = await self._run(f"getent passwd {shlex.quote(name)}", user="root")
        fields = (found.stdout or "").strip().split(":")
        if found.return_code == 0 and len(fields) >= 6:
            uid, gid, home = int(fields[2]), int(fields[3]), fields[5] or str(TMP_DIR)
        elif name.isdigit():
            uid, gid, home = int(name), int(name), str(TMP_DIR)
        else:
            raise SandboxUserError(
                f"user {name!r} is not defined in the image's /etc/passwd; use root, a "
                "numeric uid, or create the user with a RUN step (useradd)"
            )
        return Identity(uid, gid, home, FILE_CAPABILITIES if uid == 0 else ())

    def verifier_home(self, home: str, owner: Identity) -> Path | None:
        """A writable copy-on-write view of `home` as the image holds it (never as the
        agent left it), mounted on the host for a shared verifier running as `owner`;
        None where the image has no such directory inside itself. Blocking."""
        assert self.image is not None and self._layers is not None, "prepare() comes first"
        sandbox = self.filesystem.root
        image = verifier_mount(sandbox, IMAGE_VIEW)
        if not is_mounted(image):
            mount_read_only(
                image.name,
                [layer.diff for layer in self.image.layers],
                relative_to=self._layers.root,
            )
        found = Path(os.path.realpath(image / home.lstrip("/")))
        # A symlink of the image may point anywhere on the host once resolved here.
        if not found.is_relative_to(image) or not found.is_dir():
            return None
        base = self.filesystem.writable_root / "verifier-homes" / str(owner.uid)
        upper, work = base / "upper", base / "work"
        upper.mkdir(parents=True, exist_ok=True)
        os.chown(upper, host_id(owner.uid), host_id(owner.gid))
        name = verifier_mount(sandbox, f"home-{owner.uid}").name
        return mount_overlay(name, [found], upper, work, relative_to=found.parent)

    def tear_down(self) -> None:
        """Unmount the sandbox's overlays and let go of the image's layers."""
        held, self._held = self._held, None
        if held is None:
            return
        try:
            for mounted in [
                *verifier_mounts(self.filesystem.root),
                image_root(self.filesystem.root),
            ]:
                unmount(mounted)
        finally:
            held.release()
