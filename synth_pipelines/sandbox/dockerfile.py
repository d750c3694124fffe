"""The Dockerfile subset the local sandbox can reproduce without building an image.

The host's read-only system stands in for the base image, so only instructions
that lay files down or set metadata can be honoured exactly: `FROM` (recorded),
`WORKDIR`, `COPY`/`ADD` of files from the build context, `ENV`, and the
instructions that change nothing inside a running container (`ARG`, `LABEL`,
`MAINTAINER`, `EXPOSE`). Everything else (`RUN`, `USER`, multi-stage builds,
remote `ADD`, ...) would build something the host does not have, so the task is
refused with the instruction and line that needs a real image build. A Dockerfile
that passes here builds the same workspace under Docker.
"""

from __future__ import annotations

import io
import json
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from dockerfile_parse import DockerfileParser

from synth_pipelines.sandbox.errors import UnsupportedTaskError

IGNORED_INSTRUCTIONS = frozenset({"COMMENT", "ARG", "LABEL", "MAINTAINER", "EXPOSE"})
REMOTE_SOURCE_MARKERS = ("://", "git@")


@dataclass(frozen=True)
class CopyStep:
    """One `COPY`/`ADD`: context-relative sources into an absolute destination."""

    sources: tuple[str, ...]
    destination: PurePosixPath
    destination_is_dir: bool
    extract_archives: bool
    chmod: int | None
    chown: str | None
    line: int


@dataclass(frozen=True)
class DockerfileRecipe:
    base_image: str
    workdir: PurePosixPath | None
    workdirs: tuple[PurePosixPath, ...]
    env: dict[str, str]
    copies: tuple[CopyStep, ...]


@dataclass(frozen=True)
class _Instruction:
    name: str
    value: str
    line: int
    text: str


def read_dockerfile(
    dockerfile: Path, *, task: str, base_env: Mapping[str, str]
) -> DockerfileRecipe:
    """Parse `dockerfile`, refusing anything outside the supported subset.

    `base_env` stands in for the base image's environment, so `ENV PATH=/x:$PATH`
    extends the sandbox's PATH the way it would extend the image's.
    """
    context = dockerfile.parent
    if (context / ".dockerignore").exists():
        raise UnsupportedTaskError(
            task, f"{context.name}/.dockerignore is not applied by the local sandbox"
        )
    parser = DockerfileParser(
        fileobj=io.BytesIO(dockerfile.read_bytes()),
        env_replace=True,
        parent_env=dict(base_env),
    )
    where = f"{context.name}/{dockerfile.name}"
    instructions = [
        _Instruction(
            name=item["instruction"],
            value=item["value"],
            line=item["startline"] + 1,
            text=" ".join(item["content"].split()),
        )
        for item in parser.structure
    ]
    base_image: str | None = None
    workdir: PurePosixPath | None = None
    workdirs: list[PurePosixPath] = []
    copies: list[CopyStep] = []
    for instruction in instructions:
        refuse = _refusal(task, where, instruction)
        if instruction.name in IGNORED_INSTRUCTIONS or instruction.name == "ENV":
            continue
        if instruction.name == "FROM":
            if base_image is not None:
                raise refuse("multi-stage builds need an image build")
            base_image = _from_image(instruction.value)
        elif base_image is None:
            raise refuse("instructions before FROM are not a valid Dockerfile")
        elif instruction.name == "WORKDIR":
            _refuse_substitution(instruction, refuse)
            workdir = _absolute(workdir, instruction.value.strip())
            workdirs.append(workdir)
        elif instruction.name in ("COPY", "ADD"):
            _refuse_substitution(instruction, refuse)
            copies.append(_copy_step(instruction, workdir, refuse))
        else:
            raise refuse(f"{instruction.name} needs an image build")
    if base_image is None:
        raise UnsupportedTaskError(task, f"{where} has no FROM instruction")
    return DockerfileRecipe(
        base_image=base_image,
        workdir=workdir,
        workdirs=tuple(workdirs),
        env={**base_env, **parser.envs},
        copies=tuple(copies),
    )


def context_sources(dockerfile: Path) -> list[tuple[str, int]]:
    """(source, line) of every build-context source a Dockerfile's COPY/ADD names,
    whatever else it holds: what any builder, not only the local sandbox, copies from
    the build context. Remote sources, `--from` stages and variables are not the
    context's, so they are left out."""
    parser = DockerfileParser(fileobj=io.BytesIO(dockerfile.read_bytes()))
    found = []
    for item in parser.structure:
        if item["instruction"] not in ("COPY", "ADD") or "$" in item["value"]:
            continue
        words = item["value"].split()
        flags = [word for word in words if word.startswith("--")]
        if any(flag.startswith("--from") for flag in flags):
            continue
        rest = " ".join(words[len(flags) :])
        arguments = json.loads(rest) if rest.startswith("[") else rest.split()
        found += [
            (source, item["startline"] + 1)
            for source in arguments[:-1]
            if not any(marker in source for marker in REMOTE_SOURCE_MARKERS)
        ]
    return found


Refuse = Callable[[str], UnsupportedTaskError]


def _refusal(task: str, where: str, instruction: _Instruction) -> Refuse:
    def refuse(reason: str) -> UnsupportedTaskError:
        return UnsupportedTaskError(
            task, f"{where} line {instruction.line} `{instruction.text}`: {reason}"
        )

    return refuse


def _refuse_substitution(instruction: _Instruction, refuse: Refuse) -> None:
    if "$" in instruction.value:
        raise refuse("variable substitution in WORKDIR/COPY/ADD is not supported")


def _from_image(value: str) -> str:
    words = [word for word in value.split() if not word.startswith("--")]
    return words[0]


def _copy_step(
    instruction: _Instruction, workdir: PurePosixPath | None, refuse: Refuse
) -> CopyStep:
    value = instruction.value.strip()
    flags: dict[str, str] = {}
    words = value.split()
    while words and words[0].startswith("--"):
        name, _, flag_value = words.pop(0)[2:].partition("=")
        flags[name] = flag_value
    rest = " ".join(words)
    arguments = json.loads(rest) if rest.startswith("[") else rest.split()
    unsupported = set(flags) - {"chmod", "chown", "link"}
    if unsupported:
        raise refuse(f"--{sorted(unsupported)[0]} needs an image build")
    if len(arguments) < 2:
        raise refuse("COPY/ADD needs at least one source and a destination")
    *sources, destination = arguments
    if any(marker in source for source in sources for marker in REMOTE_SOURCE_MARKERS):
        raise refuse("remote sources cannot be fetched by the local sandbox")
    chmod = flags.get("chmod")
    if chmod is not None and not _is_octal(chmod):
        raise refuse("only octal --chmod values are supported")
    return CopyStep(
        sources=tuple(sources),
        destination=_absolute(workdir, destination),
        destination_is_dir=_names_directory(destination) or len(sources) > 1,
        extract_archives=instruction.name == "ADD",
        chmod=int(chmod, 8) if chmod is not None else None,
        chown=flags.get("chown"),
        line=instruction.line,
    )


def _absolute(workdir: PurePosixPath | None, path: str) -> PurePosixPath:
    return PurePosixPath(posixpath.normpath(posixpath.join(str(workdir or "/"), path)))


def _names_directory(destination: str) -> bool:
    return destination in (".", "..") or destination.endswith(("/", "/.", "/.."))


def _is_octal(value: str) -> bool:
    return bool(value) and all(char in "01234567" for char in value)
