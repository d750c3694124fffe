"""One interpreter for profiles: the launch a recipe means, given the runtime's bindings.

`synth agent run` and Harbor-managed trials both call `build_launch`; instruction
delivery, arguments, files, setup, environment and working directory are resolved here
and nowhere else. The runtime supplies task, run, attempt and effective-model bindings; it
never rebuilds the recipe.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from dataclasses import asdict, dataclass

from synth_pipelines.agents.bindings import RuntimeBindings
from synth_pipelines.agents.constraints import check_launch_constraints
from synth_pipelines.agents.engines import EngineRuntime, engine_runtime
from synth_pipelines.contracts.profile import EnvBinding, Profile

HOME = "/root"
INSTRUCTION_STDIN = "/tmp/synth-instruction.txt"


@dataclass(frozen=True)
class FileWrite:
    path: str
    content: str
    executable: bool


@dataclass(frozen=True)
class Launch:
    engine: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    files: tuple[FileWrite, ...]
    setup: tuple[str, ...]
    workdir: str
    stdin_path: str | None
    required_outputs: tuple[str, ...]
    log_path: str

    def command(self) -> str:
        """The shell command that runs the harness, its output kept in the agent log."""
        redirect = f" < {shlex.quote(self.stdin_path)}" if self.stdin_path else " < /dev/null"
        argv = " ".join(shlex.quote(part) for part in self.argv)
        return f"{argv}{redirect} > {shlex.quote(self.log_path)} 2>&1"

    def record(self) -> dict[str, object]:
        return asdict(self)

    def digest(self) -> str:
        data = json.dumps(self.record(), sort_keys=True).encode()
        return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _resolve(path: str, workdir: str) -> str:
    if path.startswith("~/"):
        return posixpath.join(HOME, path[2:])
    return posixpath.normpath(posixpath.join(workdir, path))


def _lowers(chosen: str, model_limit: str) -> bool:
    """Whether a profile's output limit is below the model's (or the model's is a
    placeholder, in the launch's record)."""
    return not model_limit.isdecimal() or int(chosen) < int(model_limit)


def _env_value(binding: EnvBinding, bindings: RuntimeBindings) -> str:
    """A binding's literal value, else the runtime value it names (it holds exactly one)."""
    if binding.value is not None:
        return binding.value
    assert binding.bind is not None
    return bindings.value(binding.bind)


def build_launch(
    profile: Profile,
    bindings: RuntimeBindings,
    instruction: str,
    task_workdir: str,
    runtime: EngineRuntime | None = None,
) -> Launch:
    runtime = runtime or engine_runtime(profile.engine)
    check_launch_constraints(profile, runtime)
    workdir = profile.workdir or task_workdir
    files = [FileWrite(_resolve(f.path, workdir), f.content, f.executable) for f in profile.files]
    argv = [*runtime.argv(bindings.model), *profile.args]
    stdin_path: str | None = None
    delivery = profile.instruction
    if delivery.mode == "stdin":
        stdin_path = INSTRUCTION_STDIN
        files.append(FileWrite(INSTRUCTION_STDIN, instruction, False))
    elif delivery.mode == "argument":
        argv.append(instruction)
    else:
        assert delivery.path is not None
        files.append(FileWrite(_resolve(delivery.path, workdir), instruction, False))
    chosen = {binding.name: _env_value(binding, bindings) for binding in profile.env}
    mandatory = runtime.mandatory_env(bindings)
    limit = runtime.output_limit_env
    if limit in chosen and limit in mandatory and _lowers(chosen[limit], mandatory[limit]):
        mandatory[limit] = chosen[limit]
    env = {"HOME": HOME, **chosen, **mandatory}
    return Launch(
        engine=profile.engine,
        argv=tuple(argv),
        env=tuple(sorted(env.items())),
        files=tuple(files),
        setup=tuple(profile.setup),
        workdir=workdir,
        stdin_path=stdin_path,
        required_outputs=tuple(_resolve(p, workdir) for p in profile.required_outputs),
        log_path=f"{bindings.log_dir}/{runtime.log_name}",
    )
