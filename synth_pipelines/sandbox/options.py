"""The bwrap environment's kwargs (Harbor's `EnvironmentConfig.kwargs`, `--ek` on its CLI).

The host's places and image settings are required: the process that starts trials
reads them from its settings once and passes them down with every environment
(`runtime/harbor_trials.py`), so nothing below reads settings of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from harbor.environments.options import EnvironmentOptions
from harbor.models.trial.config import ServiceVolumeConfig
from pydantic import BaseModel, ConfigDict, Field, field_validator

from synth_pipelines.config import registry_hosts
from synth_pipelines.sandbox.errors import SandboxPathError, UnsupportedTaskError
from synth_pipelines.sandbox.filesystem import Bind

DEFAULT_PIDS_MAX = 4096


class ImageCacheOptions(BaseModel):
    """Where this host keeps the image cache, and how images are built in it.

    The platform's settings (`config.Settings`) hold each under the same name, so
    `ImageCacheOptions.model_validate(settings, from_attributes=True)` derives them.
    """

    model_config = ConfigDict(from_attributes=True)

    images_dir: Path = Field(description="Bases and layers of the local image builder.")
    debian_mirror: str = Field(description="The Debian archive bases are made from.")
    image_step_timeout_sec: float = Field(gt=0, description="The longest one step may run.")
    image_cache_mb: int = Field(
        ge=0, description="The layer store's bound, pruned past after each build."
    )
    image_registry_hosts: tuple[str, ...] = Field(
        description="The package registries an image build's RUN steps may reach (`host` "
        "or `host:port`), through the builder's proxy."
    )

    @field_validator("image_registry_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        return registry_hosts(value)


class HostSettings(ImageCacheOptions):
    """Where this host keeps sandboxes and the image cache, and how images are built."""

    sandboxes_dir: Path = Field(description="One directory per sandbox, with its lease.")


class BwrapOptions(EnvironmentOptions, HostSettings):
    """`--ek` options of the bwrap environment."""

    pids_max: int = Field(
        default=DEFAULT_PIDS_MAX,
        ge=16,
        description="Most processes and threads the sandbox may hold at once (cgroup pids.max).",
    )
    read_only_binds: list[str] = Field(
        default_factory=list,
        description="'HOST_PATH:SANDBOX_PATH' bound read-only, e.g. a harness's runtime. "
        "Unlike Harbor's `mounts`, these reach the separate verifier environment too "
        "(a judge runs there).",
    )


def host_binds(
    options: BwrapOptions, mounts: Iterable[ServiceVolumeConfig], *, task: str
) -> list[Bind]:
    """The host paths bound into the sandbox: the options' read-only binds, then
    Harbor's mounts, which must be binds."""
    binds = []
    for spec in options.read_only_binds:
        source, separator, target = spec.partition(":")
        if not separator or not target.startswith("/"):
            raise SandboxPathError(
                f"read_only_binds entry {spec!r} must be 'HOST_PATH:/SANDBOX_PATH'"
            )
        binds.append(
            Bind(source=Path(source).resolve(), target=PurePosixPath(target), read_only=True)
        )
    for mount in mounts:
        if mount["type"] != "bind":
            raise UnsupportedTaskError(
                task,
                f"{mount['type']} mount {mount['target']!r} is not supported; "
                "the local sandbox only binds host directories",
            )
        binds.append(
            Bind(
                source=Path(mount["source"]).resolve(),
                target=PurePosixPath(mount["target"]),
                read_only=bool(mount.get("read_only")),
            )
        )
    return binds
