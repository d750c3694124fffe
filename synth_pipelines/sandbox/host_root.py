"""The host's read-only system as a sandbox's root, with writable host directories.

For a Dockerfile without RUN or USER steps: the host's system directories stand in
for the base image (`filesystem.py` says what is mounted), and the recipe's WORKDIR
and COPY/ADD steps are reproduced in one writable host directory per top-level path,
beside Harbor's own (`/logs`, `/tests`, ...). Users are the host's, whose
`/etc/passwd` the sandbox shares.
"""

from __future__ import annotations

import pwd
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from harbor.models.trial.paths import EnvironmentPaths

from synth_pipelines.sandbox.dockerfile import DockerfileRecipe
from synth_pipelines.sandbox.errors import SandboxUserError, TaskDefinitionError
from synth_pipelines.sandbox.filesystem import (
    Bind,
    SandboxFilesystem,
    resolve_sources,
    top_level,
    writable_top,
)
from synth_pipelines.sandbox.identity import (
    ROOT,
    ROOT_HOME,
    TMP_DIR,
    Identity,
    is_root,
    mapped,
)
from synth_pipelines.sandbox.image_build import Image
from synth_pipelines.sandbox.root import INSTALLED_AGENT_DIR, RootLayout


def check_host_recipe(
    recipe: DockerfileRecipe, context: Path, *, task: str, workdir: str | None
) -> None:
    """Refuse a recipe whose files would land where the host root cannot write."""
    for path in recipe.workdirs:
        writable_top(path, task=task, why="WORKDIR")
    for step in recipe.copies:
        writable_top(step.destination, task=task, why=f"COPY destination (line {step.line})")
        try:
            resolve_sources(step, context)
        except (FileNotFoundError, PermissionError) as error:
            raise TaskDefinitionError(task, str(error)) from None
    if workdir:
        writable_top(PurePosixPath(workdir), task=task, why="[environment].workdir")


class HostRoot:
    """The host's system with the task's files in writable host directories."""

    image: Image | None = None

    def __init__(
        self,
        recipe: DockerfileRecipe,
        context: Path,
        *,
        sandbox_dir: Path,
        binds: Iterable[Bind],
        paths: EnvironmentPaths,
        workdir: str | None,
        bundled_tests: bool,
    ):
        self.recipe = recipe
        self._context = context
        self._tests_dir = paths.tests_dir if bundled_tests else None
        fixed = [
            paths.logs_dir,
            paths.tests_dir,
            paths.solution_dir,
            paths.default_skills_dir,
            INSTALLED_AGENT_DIR,
            TMP_DIR,
            ROOT_HOME,
            *recipe.workdirs,
            *(step.destination for step in recipe.copies),
        ]
        if workdir:
            fixed.append(PurePosixPath(workdir))
        self.filesystem = SandboxFilesystem(sandbox_dir, {top_level(path) for path in fixed}, binds)

    async def prepare(self) -> None:
        """Nothing: the host's system is there already."""

    def lay_down(self) -> RootLayout:
        self.filesystem.create()
        self.filesystem.lay_down(self.recipe, self._context)
        if self._tests_dir is not None:
            # Bundled tests: Harbor skips uploading tests/, expecting the verifier
            # image to hold them at /tests already.
            self.filesystem.copy_into(self._context, self._tests_dir)
        return RootLayout(self.filesystem.bwrap_arguments())

    def attachments(self) -> list[tuple[Path, PurePosixPath, bool]]:
        return self.filesystem.attachments()

    async def finish_start(self) -> None:
        """Nothing: the task's files were laid down before the start."""

    async def identity(self, user: str | int | None) -> Identity:
        """Root, or a user of the host's /etc/passwd (or a bare uid), with HOME /tmp."""
        if is_root(user):
            return ROOT
        name = str(user)
        try:
            entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
        except KeyError:
            if not name.isdigit():
                raise SandboxUserError(
                    f"user {user!r} is not defined in /etc/passwd, which the sandbox shares "
                    "with the host; use root, a numeric uid, or a user the host defines"
                ) from None
            uid = gid = int(name)
        else:
            uid, gid = entry.pw_uid, entry.pw_gid
        return mapped(Identity(uid, gid, str(TMP_DIR)))

    def verifier_home(self, home: str, owner: Identity) -> Path | None:
        """None: the host root has no image whose home a verifier could start from."""
        return None

    def tear_down(self) -> None:
        """Nothing: the host root holds nothing beyond the sandbox's directory."""
