"""Agent profiles: the executable recipe of an actor or a judge, and its identity.

A profile records the native engine and its version, the model binding, the files it
supplies (instructions, skills, hooks, settings, tool configuration), setup commands,
working directory, arguments, environment bindings, how the instruction is delivered and
which outputs must exist afterwards. Identity is the SHA-256 of the profile document's
RFC 8785 canonical bytes; consumers verify the digest of the bytes they received instead
of re-serializing.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

import rfc8785
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from synth_pipelines.contracts.refs import check_name, check_version

Engine = Literal["oracle", "nop", "claude-code", "builtin"]
RuntimeBinding = Literal["task", "run", "attempt", "batch", "model", "proxy_url", "token"]
# TOKENS (a count, such as an output limit) is not a secret; TOKEN is.
SECRET_NAME = re.compile(r"(KEY|TOKEN(?!S)|SECRET|PASSWORD|CREDENTIAL)", re.IGNORECASE)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SuppliedFile(_Strict):
    """A file the recipe brings: relative paths land in the working directory, `~/` in HOME."""

    path: str = Field(min_length=1)
    content: str
    executable: bool = False

    @field_validator("path")
    @classmethod
    def _safe(cls, value: str) -> str:
        parts = value.removeprefix("~/").split("/")
        if value.startswith("/") or ".." in parts or "" in parts:
            raise ValueError(
                f"file path {value!r} must be relative (to the working directory) or start "
                "with '~/' (the home directory), without '..'"
            )
        return value


class EnvBinding(_Strict):
    """An environment variable: a literal value, or a value the runtime supplies."""

    name: str
    value: str | None = None
    bind: RuntimeBinding | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EnvBinding:
        if not ENV_NAME.match(self.name):
            raise ValueError(f"environment variable name {self.name!r} is not valid")
        if (self.value is None) == (self.bind is None):
            raise ValueError(f"env {self.name}: give exactly one of 'value' or 'bind'")
        if self.value is not None and SECRET_NAME.search(self.name):
            raise ValueError(
                f"env {self.name} looks like a secret; profiles never carry secret values "
                "(bind the scoped model token with {'bind': 'token'} instead)"
            )
        return self


class InstructionDelivery(_Strict):
    mode: Literal["stdin", "argument", "file"] = "stdin"
    path: str | None = Field(default=None, description="where the file goes, for mode 'file'")

    @model_validator(mode="after")
    def _path(self) -> InstructionDelivery:
        if (self.mode == "file") != (self.path is not None):
            raise ValueError("instruction.path is required for mode 'file' and only then")
        return self


class Profile(_Strict):
    name: str
    version: str
    description: str = ""
    role: Literal["actor", "judge"] = "actor"
    engine: Engine
    engine_version: str | None = None
    model: str | None = Field(
        default=None, description="base model id or checkpoint reference bound to the recipe"
    )
    files: list[SuppliedFile] = Field(default_factory=list)
    setup: list[str] = Field(default_factory=list)
    workdir: str | None = Field(default=None, description="absolute; defaults to the task's")
    args: list[str] = Field(default_factory=list)
    env: list[EnvBinding] = Field(default_factory=list)
    instruction: InstructionDelivery = Field(default_factory=InstructionDelivery)
    required_outputs: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value, "profile")

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        return check_version(value, "profile")

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"workdir {value!r} must be an absolute path")
        return value

    @model_validator(mode="after")
    def _unique(self) -> Profile:
        names = [binding.name for binding in self.env]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"env variables set twice: {', '.join(twice)}")
        paths = [file.path for file in self.files]
        twice = sorted({p for p in paths if paths.count(p) > 1})
        if twice:
            raise ValueError(f"files supplied twice: {', '.join(twice)}")
        return self

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def launched(self) -> bool:
        """Whether the profile launcher runs it (Harbor's oracle and nop run themselves)."""
        return self.engine in ("claude-code", "builtin")


def profile_digest(canonical: bytes) -> str:
    return f"sha256:{hashlib.sha256(canonical).hexdigest()}"


class ProfileDigestError(ValueError):
    """Bytes that do not match the digest they were published or pinned with."""


class PinnedProfile(BaseModel):
    """A profile as an experiment pinned it: canonical bytes and their digest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    digest: str
    canonical: str

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> PinnedProfile:
        """Validate a profile document and pin the canonical form of the document itself
        (not a re-serialization of our model, so defaults added later never change it)."""
        profile = Profile.model_validate(document)
        data = rfc8785.dumps(document)
        return cls(
            name=profile.name,
            version=profile.version,
            digest=profile_digest(data),
            canonical=data.decode(),
        )

    def profile(self) -> Profile:
        """The recipe, after checking that the bytes still match the pinned digest."""
        data = self.canonical.encode()
        actual = profile_digest(data)
        if actual != self.digest:
            raise ProfileDigestError(
                f"profile {self.name}@{self.version} bytes do not match digest {self.digest} "
                f"(got {actual}): the pinned profile was altered"
            )
        return Profile.model_validate(json.loads(data))
