"""Native engines the launcher can run, and what each needs from the sandbox.

Routing to the proxy, the scoped token and the model binding are set here, for every
launch, and cannot be changed by a profile (see `constraints.py`). Everything else keeps
the harness's own configuration hierarchy.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from synth_pipelines.agents.bindings import RuntimeBindings

CLAUDE_CODE_VERSION = "2.1.328"
MODEL_ALIASES = (
    "ANTHROPIC_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
)


class EngineUnavailableError(RuntimeError):
    pass


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str

    def as_bind(self) -> str:
        """The local sandbox's `read_only_binds` form."""
        return f"{self.source}:{self.target}"


@dataclass(frozen=True)
class EngineRuntime:
    engine: str
    version: str
    log_name: str
    forbidden_env: frozenset[str] = field(default_factory=frozenset)
    forbidden_args: frozenset[str] = field(default_factory=frozenset)
    output_limit_env: str | None = None
    """The variable that bounds the harness's output tokens per call: the launcher sets it
    to the model's limit, and a profile may only lower it (a recipe's choice)."""

    def argv(self, model: str) -> list[str]:
        raise NotImplementedError

    def mandatory_env(self, bindings: RuntimeBindings) -> dict[str, str]:
        raise NotImplementedError

    def mounts(self, claude_code: Path) -> list[Mount]:
        """What the sandbox binds read-only for this engine; `claude_code` is where the
        setup installed Claude Code (`Settings.claude_code`)."""
        raise NotImplementedError


@dataclass(frozen=True)
class ClaudeCodeRuntime(EngineRuntime):
    """The real Claude Code CLI (a native binary) installed by the setup, read-only inside."""

    target: str = "/opt/synth/claude-code/claude"

    def argv(self, model: str) -> list[str]:
        return [
            self.target,
            "--print",
            "--verbose",
            "--output-format",
            "stream-json",
            "--model",
            model,
        ]

    def mandatory_env(self, bindings: RuntimeBindings) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": bindings.proxy_url,
            "ANTHROPIC_AUTH_TOKEN": bindings.token,
            **dict.fromkeys(MODEL_ALIASES, bindings.model),
            "CLAUDE_CODE_MAX_CONTEXT_TOKENS": bindings.context_window,
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": bindings.max_output_tokens,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CONFIG_DIR": f"{bindings.log_dir}/claude",
            # The sandbox runs the harness as root; this is the harness's documented switch.
            "IS_SANDBOX": "1",
        }

    def mounts(self, claude_code: Path) -> list[Mount]:
        if not claude_code.exists():
            raise EngineUnavailableError(
                f"Claude Code {self.version} is not installed at {claude_code}; run `make setup`"
            )
        return [Mount(claude_code.resolve(), self.target)]


@dataclass(frozen=True)
class BuiltinRuntime(EngineRuntime):
    """Our own small tool-using agent, run by the platform's Python, read-only inside."""

    target: str = "/opt/synth/builtin/agent.py"

    @property
    def python(self) -> str:
        return str(Path(sys.prefix) / "bin" / "python")

    def argv(self, model: str) -> list[str]:
        # -S: the agent needs only the standard library, and the site-packages' start-up
        # (path files, the editable install's finder) would be a fifth of its start.
        return [self.python, "-S", self.target, "--model", model]

    def mandatory_env(self, bindings: RuntimeBindings) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": bindings.proxy_url,
            "ANTHROPIC_AUTH_TOKEN": bindings.token,
            "SYNTH_MAX_OUTPUT_TOKENS": bindings.max_output_tokens,
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    def mounts(self, claude_code: Path) -> list[Mount]:
        prefixes = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
        return [
            *(Mount(prefix, str(prefix)) for prefix in sorted(prefixes)),
            Mount(Path(__file__).with_name("builtin.py").resolve(), self.target),
        ]


ROUTING_ENV = frozenset(
    {"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_CUSTOM_HEADERS"}
)


def engine_runtime(engine: str) -> EngineRuntime:
    if engine == "claude-code":
        return ClaudeCodeRuntime(
            engine=engine,
            version=CLAUDE_CODE_VERSION,
            log_name="claude-code.jsonl",
            forbidden_env=ROUTING_ENV
            | frozenset(MODEL_ALIASES)
            | {"CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CONFIG_DIR"},
            forbidden_args=frozenset({"--model", "--fallback-model"}),
            output_limit_env="CLAUDE_CODE_MAX_OUTPUT_TOKENS",
        )
    if engine == "builtin":
        return BuiltinRuntime(
            engine=engine,
            version="1",
            log_name="builtin.jsonl",
            forbidden_env=ROUTING_ENV | {"SYNTH_MAX_OUTPUT_TOKENS"},
            forbidden_args=frozenset({"--model"}),
        )
    raise ValueError(f"engine {engine!r} is not run by the profile launcher")
