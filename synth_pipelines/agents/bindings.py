"""What only the runtime knows at a launch: the values a profile refers to by name, and an
engine's mandatory environment is made of."""

from __future__ import annotations

from dataclasses import dataclass, fields

from synth_pipelines.contracts.profile import RuntimeBinding


@dataclass(frozen=True)
class RuntimeBindings:
    """Values only the runtime knows; a profile refers to them by name."""

    task: str
    run: str
    attempt: str
    batch: str
    model: str
    proxy_url: str
    token: str
    context_window: str
    max_output_tokens: str
    log_dir: str = "/logs/agent"

    def value(self, name: RuntimeBinding) -> str:
        """The value a profile's `bind` names: each name is one of these string fields."""
        bound: str = getattr(self, name)
        return bound

    @classmethod
    def placeholders(cls, log_dir: str = "/logs/agent") -> RuntimeBindings:
        """Every runtime value by name: what a launch records instead of secrets and ids."""
        return cls(
            **{f.name: f"${{{f.name}}}" for f in fields(cls) if f.name != "log_dir"},
            log_dir=log_dir,
        )
