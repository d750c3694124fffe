"""The Dockerfile subset the local sandbox reproduces, with or without an image build.

A Dockerfile of only `FROM`, `WORKDIR`, `COPY`/`ADD` of build-context files and
`ENV` (plus what changes nothing in a running container: `ARG`, `LABEL`,
`MAINTAINER`, `EXPOSE`, `CMD`, `ENTRYPOINT`, ...) needs no image: the host's
read-only system stands in for the base and the files are laid down in the
sandbox's writable directories. One with `RUN` or `USER` steps is built as an image
(`image_build.py`) from a base the builder can make offline (`bases.py`), step by
step in the order written (`recipe.steps`). Either way, what no builder here can do
(multi-stage builds, `COPY --from`, remote `ADD`, `RUN --mount`) is refused with the
instruction and line that needs a container engine's build.
"""

from __future__ import annotations

import io
import json
import posixpath
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from dockerfile_parse import DockerfileParser

from synth_pipelines.contracts.build_context import REMOTE_SOURCE_MARKERS
from synth_pipelines.sandbox.errors import UnsupportedTaskError

# What changes nothing in the files or the environment a command sees: a trial runs
# its own commands, never the image's entrypoint, and keeps no volumes.
IGNORED_INSTRUCTIONS = frozenset(
    {
        "COMMENT",
        "ARG",
        "LABEL",
        "MAINTAINER",
        "EXPOSE",
        "CMD",
        "ENTRYPOINT",
        "VOLUME",
        "STOPSIGNAL",
        "HEALTHCHECK",
        "SHELL",
        "ONBUILD",
    }
)


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
    text: str = ""


@dataclass(frozen=True)
class RunStep:
    """One `RUN`: a shell command and the environment it runs with (the base's,
    every `ENV` and `ARG` before it)."""

    command: str
    env: dict[str, str]
    line: int
    text: str


@dataclass(frozen=True)
class WorkdirStep:
    path: PurePosixPath
    line: int
    text: str


@dataclass(frozen=True)
class UserStep:
    user: str
    line: int
    text: str


Step = RunStep | CopyStep | WorkdirStep | UserStep


@dataclass(frozen=True)
class DockerfileRecipe:
    base_image: str
    workdir: PurePosixPath | None
    workdirs: tuple[PurePosixPath, ...]
    env: dict[str, str]
    copies: tuple[CopyStep, ...]
    steps: tuple[Step, ...] = ()
    user: str | None = None

    @property
    def needs_build(self) -> bool:
        """Whether only an image build reproduces it: a RUN or USER step."""
        return any(isinstance(step, RunStep | UserStep) for step in self.steps)


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
    contexts = parser.context_structure
    base_image: str | None = None
    workdir: PurePosixPath | None = None
    user: str | None = None
    workdirs: list[PurePosixPath] = []
    copies: list[CopyStep] = []
    steps: list[Step] = []
    for index, instruction in enumerate(instructions):
        refuse = _refusal(task, where, instruction)
        if instruction.name in IGNORED_INSTRUCTIONS or instruction.name == "ENV":
            continue
        if instruction.name == "FROM":
            if base_image is not None:
                raise refuse("multi-stage builds need a container engine's build")
            base_image = _from_image(instruction.value)
        elif base_image is None:
            raise refuse("instructions before FROM are not a valid Dockerfile")
        elif instruction.name == "WORKDIR":
            _refuse_substitution(instruction, refuse)
            workdir = _absolute(workdir, instruction.value.strip())
            workdirs.append(workdir)
            steps.append(WorkdirStep(workdir, instruction.line, instruction.text))
        elif instruction.name in ("COPY", "ADD"):
            _refuse_substitution(instruction, refuse)
            copy = _copy_step(instruction, workdir, refuse)
            copies.append(copy)
            steps.append(copy)
        elif instruction.name == "RUN":
            context = contexts[index]
            env = {**base_env, **context.args, **context.envs}
            steps.append(_run_step(instruction, env, refuse))
        elif instruction.name == "USER":
            _refuse_substitution(instruction, refuse)
            user = instruction.value.strip()
            steps.append(UserStep(user, instruction.line, instruction.text))
        else:
            raise refuse(f"{instruction.name} needs a container engine's build")
    if base_image is None:
        raise UnsupportedTaskError(task, f"{where} has no FROM instruction")
    return DockerfileRecipe(
        base_image=base_image,
        workdir=workdir,
        workdirs=tuple(workdirs),
        env={**base_env, **parser.envs},
        copies=tuple(copies),
        steps=tuple(steps),
        user=user,
    )


Refuse = Callable[[str], UnsupportedTaskError]


def _refusal(task: str, where: str, instruction: _Instruction) -> Refuse:
    def refuse(reason: str) -> UnsupportedTaskError:
        return UnsupportedTaskError(
            task, f"{where} line {instruction.line} `{instruction.text}`: {reason}"
        )

    return refuse


def _refuse_substitution(instruction: _Instruction, refuse: Refuse) -> None:
    if "$" in instruction.value:
        raise refuse("variable substitution in WORKDIR/COPY/ADD/USER is not supported")


def _run_step(instruction: _Instruction, env: dict[str, str], refuse: Refuse) -> RunStep:
    value = instruction.value.strip()
    if value.startswith("--"):
        flag = value.split()[0].partition("=")[0]
        raise refuse(f"RUN {flag} needs a container engine's build")
    if value.startswith("["):
        try:
            command = shlex.join(json.loads(value))
        except (ValueError, TypeError):
            raise refuse("RUN's exec form must be a JSON list of strings") from None
    else:
        command = value
    return RunStep(command=command, env=env, line=instruction.line, text=instruction.text)


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
        raise refuse(f"--{sorted(unsupported)[0]} needs a container engine's build")
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
        text=instruction.text,
    )


def _absolute(workdir: PurePosixPath | None, path: str) -> PurePosixPath:
    return PurePosixPath(posixpath.normpath(posixpath.join(str(workdir or "/"), path)))


def _names_directory(destination: str) -> bool:
    return destination in (".", "..") or destination.endswith(("/", "/.", "/.."))


def _is_octal(value: str) -> bool:
    return bool(value) and all(char in "01234567" for char in value)
