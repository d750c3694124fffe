"""The models the proxy serves: limits, native format and where sampling goes.

A request's `model` picks an entry; the entry names its family adapter, its context window and
output limit (which bound prompt fitting and `max_tokens`), and its backend route. Only Tinker
routes are trainable. The other routes serve inference only (a judge, say): an external
OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp, `transformers serve`) or
an upstream Anthropic Messages endpoint; they answer text, so their calls are captured as
text evidence that nothing learns from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from synth_pipelines.config import Settings
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.model_info import ModelInfo
from synth_pipelines.contracts.validation_errors import describe_validation_error
from synth_pipelines.rendering.adapters import adapter_for
from synth_pipelines.rendering.adapters.base import Family, ModelAdapter
from synth_pipelines.rendering.model_names import QWEN3_LEARNER


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TinkerRoute(_Frozen):
    """Sampling through the tinker SDK: a base model, or a `tinker://` sampler checkpoint."""

    kind: Literal["tinker"] = "tinker"
    base_model: str | None = None
    model_path: str | None = None
    service_url: str | None = None
    """A tinker-compatible service other than the configured model service (a teacher that
    answers from a script); None: the configured one."""

    @model_validator(mode="after")
    def _one_target(self) -> TinkerRoute:
        if (self.base_model is None) == (self.model_path is None):
            raise ValueError("a tinker route needs exactly one of base_model or model_path")
        if self.model_path is not None and not self.model_path.startswith("tinker://"):
            raise ValueError(f"model_path must be a tinker:// path, got {self.model_path!r}")
        return self


class _InferenceRoute(_Frozen):
    kind: str
    base_url: str = Field(pattern=r"^https?://")
    model: str = Field(min_length=1)
    """The model's name at that server."""
    api_key_env: str | None = None
    """The environment variable of the proxy's process holding the server's key; None: the
    server takes no key. A key never comes from a sandbox's request."""

    @property
    def sampler(self) -> str:
        """The route as captured calls name it (`Interaction.sampler`)."""
        return f"{self.kind}:{self.model}@{self.base_url}"


class OpenAIChatRoute(_InferenceRoute):
    """An OpenAI-compatible chat-completions server: Messages are translated to
    `POST {base_url}/chat/completions` and back (`proxy.chat_translation`)."""

    kind: Literal["openai_chat"] = "openai_chat"


class AnthropicRoute(_InferenceRoute):
    """An upstream Anthropic Messages endpoint: requests are forwarded to
    `POST {base_url}/v1/messages` with the upstream's model name."""

    kind: Literal["anthropic"] = "anthropic"


InferenceRoute = OpenAIChatRoute | AnthropicRoute
BackendRoute = Annotated[TinkerRoute | InferenceRoute, Field(discriminator="kind")]


class ModelEntry(_Frozen):
    id: str = Field(min_length=1)
    family: Family
    context_window: int = Field(gt=0)
    max_output_tokens: int = Field(gt=0)
    backend: BackendRoute
    trainable: bool
    display_name: str = ""
    checkpoint_base: str | None = None
    """For a checkpoint served as a model: the base model it was trained from, which the
    model service must serve."""

    @model_validator(mode="after")
    def _consistent(self) -> ModelEntry:
        if self.max_output_tokens >= self.context_window:
            raise ValueError(
                f"{self.id}: max_output_tokens ({self.max_output_tokens}) must be below "
                f"context_window ({self.context_window})"
            )
        if self.trainable and not isinstance(self.backend, TinkerRoute):
            raise ValueError(f"{self.id}: only tinker routes are trainable")
        return self

    def output_tokens(self, requested_max_tokens: int) -> int:
        """The `max_tokens` sampled with: the request's, capped by the model's output limit."""
        return min(requested_max_tokens, self.max_output_tokens)

    def prompt_budget(self, requested_max_tokens: int) -> int:
        """Prompt tokens that still leave room for the whole output."""
        return self.context_window - self.output_tokens(requested_max_tokens)

    def adapter(self) -> ModelAdapter:
        return adapter_for(self.family)

    @property
    def service_base_model(self) -> str | None:
        """The base model a tinker route samples (a checkpoint's own base); None for other
        routes."""
        if not isinstance(self.backend, TinkerRoute):
            return None
        return self.checkpoint_base or self.backend.base_model

    def model_info(self) -> ModelInfo:
        return ModelInfo(
            id=self.id,
            display_name=self.display_name or self.id,
            max_input_tokens=self.context_window,
            max_tokens=self.max_output_tokens,
            family=self.family,
            route=self.backend.kind,
            base_model=self.service_base_model,
            trainable=self.trainable,
        )


class ModelList(BaseModel):
    data: list[ModelInfo]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None


DEFAULT_MODELS: tuple[ModelEntry, ...] = (
    ModelEntry(
        id="synth/qwen3-tiny",
        family="qwen",
        context_window=32_768,
        max_output_tokens=8_192,
        backend=TinkerRoute(base_model="synth/qwen3-tiny"),
        trainable=True,
        display_name="Qwen3 tiny (local model service)",
    ),
    ModelEntry(
        id=QWEN3_LEARNER,
        family="qwen",
        context_window=32_768,
        max_output_tokens=8_192,
        backend=TinkerRoute(base_model=QWEN3_LEARNER),
        trainable=True,
        display_name="Qwen3 learner (local model service; the learning demo's base model)",
    ),
    # The other families' native formats end to end on the local model service: tiny seeded
    # models with each family's own tokenizer (synth_pipelines/rendering/model_names.py).
    *(
        ModelEntry(
            id=model,
            family=family,
            context_window=32_768,
            max_output_tokens=8_192,
            backend=TinkerRoute(base_model=model),
            trainable=True,
            display_name=f"{label} tiny (local model service; {label}'s tokenizer and format)",
        )
        for family, label, model in (
            ("deepseek", "DeepSeek V3.1", "synth/deepseek-tiny"),
            ("kimi", "Kimi K2", "synth/kimi-tiny"),
            ("glm", "GLM 5.3", "synth/glm-tiny"),
        )
    ),
    ModelEntry(
        id="deepseek-ai/DeepSeek-V3.1",
        family="deepseek",
        context_window=131_072,
        max_output_tokens=32_768,
        backend=TinkerRoute(base_model="deepseek-ai/DeepSeek-V3.1"),
        trainable=True,
    ),
    ModelEntry(
        id="moonshotai/Kimi-K2-Thinking",
        family="kimi",
        context_window=262_144,
        max_output_tokens=32_768,
        backend=TinkerRoute(base_model="moonshotai/Kimi-K2-Thinking"),
        trainable=True,
    ),
    ModelEntry(
        id="zai-org/GLM-5.3",
        family="glm",
        context_window=202_752,
        max_output_tokens=32_768,
        backend=TinkerRoute(base_model="zai-org/GLM-5.3"),
        trainable=True,
    ),
)


TEACHER_MODEL = f"{QWEN3_LEARNER}-teacher"


def teacher_entry(service_url: str) -> ModelEntry:
    """The learner's base model on a model service started with `--scripted`: it answers
    with the completions PUT to its script (a harness's demonstrations) and reports the
    model's own logprobs of them. A run bound to it captures what the harness sends with
    the teacher's answers; nothing trains through it."""
    return ModelEntry(
        id=TEACHER_MODEL,
        family="qwen",
        context_window=32_768,
        max_output_tokens=8_192,
        backend=TinkerRoute(base_model=QWEN3_LEARNER, service_url=service_url),
        trainable=False,
        display_name="Qwen3 learner answering from the teacher service's script",
    )


@dataclass(frozen=True)
class CheckpointModel:
    """A checkpoint served as a model: which base entry it derives from, and whose it is."""

    base_model: str
    owner: str


CheckpointLookup = Callable[[str], CheckpointModel | None]


class ModelRegistry:
    """Registered models, plus checkpoints (`tinker://.../sampler_weights/...`) derived from
    their base model's entry when a lookup is given."""

    def __init__(
        self,
        entries: Iterable[ModelEntry] = DEFAULT_MODELS,
        checkpoints: CheckpointLookup | None = None,
    ) -> None:
        self._entries: dict[str, ModelEntry] = {}
        self._checkpoints = checkpoints
        for entry in entries:
            if entry.id in self._entries:
                raise ValueError(f"model {entry.id!r} is registered twice")
            self._entries[entry.id] = entry

    def with_checkpoints(self, lookup: CheckpointLookup) -> ModelRegistry:
        return ModelRegistry(self._entries.values(), lookup)

    def checkpoint(self, model_id: str) -> CheckpointModel | None:
        if self._checkpoints is None or not model_id.startswith("tinker://"):
            return None
        return self._checkpoints(model_id)

    @classmethod
    def from_json_file(cls, path: Path) -> ModelRegistry:
        """A registry from a JSON list of entries (the shape of `ModelEntry`)."""
        return cls(read_entries(path))

    def extended(self, entries: Iterable[ModelEntry]) -> ModelRegistry:
        """This registry with more entries beside its own (a name registered twice fails)."""
        return ModelRegistry([*self._entries.values(), *entries], self._checkpoints)

    @classmethod
    def from_json(cls, text: str | bytes) -> ModelRegistry:
        return cls(_ENTRY_LIST.validate_json(text))

    def to_json(self) -> str:
        return _ENTRY_LIST.dump_json(self.entries()).decode()

    def get(self, model_id: str) -> ModelEntry:
        entry = self._entries.get(model_id)
        checkpoint = self.checkpoint(model_id) if entry is None else None
        if checkpoint is not None and checkpoint.base_model in self._entries:
            base = self._entries[checkpoint.base_model]
            return base.model_copy(
                update={
                    "id": model_id,
                    "backend": TinkerRoute(model_path=model_id),
                    "display_name": f"checkpoint of {base.id}",
                    "checkpoint_base": base.service_base_model,
                }
            )
        if entry is None:
            served = ", ".join(sorted(self._entries)) or "none"
            raise ApiError(
                "not_found_error",
                f"model: {model_id!r} is not served by this proxy; served models: {served} "
                "(GET /v1/models lists them)",
            )
        return entry

    def entries(self) -> list[ModelEntry]:
        return list(self._entries.values())

    def model_list(self) -> ModelList:
        infos = [entry.model_info() for entry in self._entries.values()]
        return ModelList(
            data=infos,
            first_id=infos[0].id if infos else None,
            last_id=infos[-1].id if infos else None,
        )


_ENTRY_LIST = TypeAdapter(list[ModelEntry])


def served_registry(teacher_service_url: str, registry_file: Path | None) -> ModelRegistry:
    """The models the proxy serves: the built-in ones, and beside them a registry file's
    (`SYNTH_MODEL_REGISTRY`), such as inference-only routes for judges."""
    registry = ModelRegistry([*DEFAULT_MODELS, teacher_entry(teacher_service_url)])
    if registry_file is None:
        return registry
    return registry.extended(read_entries(registry_file))


def read_entries(path: Path) -> list[ModelEntry]:
    """The entries of a registry file: a JSON list in the shape of `ModelEntry`."""
    try:
        return _ENTRY_LIST.validate_json(path.read_bytes())
    except OSError as exc:
        raise ValueError(f"cannot read the model registry {path}: {exc}") from None
    except ValidationError as exc:
        raise ValueError(
            f"{path} is not a valid model registry: {describe_validation_error(exc)}"
        ) from None


def configured_registry(config: Settings) -> ModelRegistry:
    """The models the platform serves: the built-in ones and a configured registry file's."""
    return served_registry(config.teacher_service_url, config.model_registry)
