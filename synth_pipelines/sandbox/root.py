"""What a sandbox stands on, chosen once per environment by its task's Dockerfile.

Without RUN or USER steps, the host's read-only system stands in for the base image
and the task's files are laid down in writable host directories (`host_root.py`);
with them, the image is built into cached layers and the sandbox's root is an overlay
of those layers with a fresh writable layer of its own (`image_root.py`). The
environment (`bwrap.py`) runs the same steps on either: everything that differs
between the two is answered here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from synth_pipelines.sandbox.dockerfile import DockerfileRecipe
from synth_pipelines.sandbox.filesystem import SandboxFilesystem
from synth_pipelines.sandbox.identity import Identity
from synth_pipelines.sandbox.image_build import Image

INSTALLED_AGENT_DIR = PurePosixPath("/installed-agent")


@dataclass(frozen=True)
class RootLayout:
    """How bubblewrap mounts a laid-down root: its arguments, and the descriptors they
    name, which stay open until bubblewrap has started."""

    arguments: list[str]
    pass_fds: tuple[int, ...] = ()

    def close(self) -> None:
        for descriptor in self.pass_fds:
            os.close(descriptor)


class SandboxRoot(Protocol):
    """One sandbox's root, from its preparation to its teardown."""

    @property
    def recipe(self) -> DockerfileRecipe:
        """The task's Dockerfile, as this root reproduces it."""
        ...

    @property
    def filesystem(self) -> SandboxFilesystem:
        """The sandbox's host directories: its writable ones and its binds."""
        ...

    @property
    def image(self) -> Image | None:
        """The image the sandbox runs on, once prepared on one."""
        ...

    async def prepare(self) -> None:
        """What comes before the sandbox has any host state (an image's build)."""
        ...

    def lay_down(self) -> RootLayout:
        """Lay the root down under the sandbox's directory (blocking: call it off the
        event loop), once its lease and storage are taken."""
        ...

    def attachments(self) -> list[tuple[Path, PurePosixPath, bool]]:
        """(host source, sandbox target, read-only) to attach once the init runs,
        parents before children."""
        ...

    async def finish_start(self) -> None:
        """What comes once the sandbox runs and Harbor's directories exist."""
        ...

    async def identity(self, user: str | int | None) -> Identity:
        """Who a command of Harbor's `user` runs as (None: the root's default user)."""
        ...

    def verifier_home(self, home: str, owner: Identity) -> Path | None:
        """A host mount holding `home` as the root's image has it, writable for `owner`,
        for a shared verifier's HOME (blocking); None: the verifier starts from an empty
        one."""
        ...

    def tear_down(self) -> None:
        """Undo what `prepare` and `lay_down` hold beyond the sandbox's directory
        (blocking); runs on every stop, whatever was done."""
        ...
