"""The model registry: entries, limits, routes, and the error for a model it does not serve."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic.types
import pytest
from pydantic import ValidationError

from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.rendering.adapters.qwen import QwenAdapter
from synth_pipelines.rendering.model_registry import (
    ModelEntry,
    ModelRegistry,
    OpenAIChatRoute,
    TinkerRoute,
)


def test_default_registry_serves_every_family_and_its_local_models() -> None:
    registry = ModelRegistry()

    families: dict[str, set[str]] = {}
    for entry in registry.entries():
        families.setdefault(entry.family, set()).add(entry.id)
    assert families == {
        "qwen": {"synth/qwen3-tiny", "synth/qwen3-learner"},
        "deepseek": {"deepseek-ai/DeepSeek-V3.1", "synth/deepseek-tiny"},
        "kimi": {"moonshotai/Kimi-K2-Thinking", "synth/kimi-tiny"},
        "glm": {"zai-org/GLM-5.3", "synth/glm-tiny"},
    }
    tiny = registry.get("synth/qwen3-tiny")
    assert tiny.trainable and tiny.backend == TinkerRoute(base_model="synth/qwen3-tiny")
    assert isinstance(tiny.adapter(), QwenAdapter)


def test_unknown_model_is_not_found_and_lists_what_is_served() -> None:
    with pytest.raises(ApiError) as caught:
        ModelRegistry().get("claude-sonnet-4-5")

    assert caught.value.status_code == 404
    assert caught.value.error_type == "not_found_error"
    assert caught.value.message.startswith("model: 'claude-sonnet-4-5' is not served")
    assert "synth/qwen3-tiny" in caught.value.message


def test_output_and_prompt_budgets_respect_the_model_limits() -> None:
    tiny = ModelRegistry().get("synth/qwen3-tiny")

    assert tiny.output_tokens(32_000) == 8_192
    assert tiny.output_tokens(256) == 256
    assert tiny.prompt_budget(32_000) == 32_768 - 8_192


def test_chat_route_is_inference_only() -> None:
    route = OpenAIChatRoute(base_url="http://127.0.0.1:8000/v1", model="qwen3")
    fields = {"id": "x", "family": "qwen", "context_window": 4096, "max_output_tokens": 512}

    assert ModelEntry(backend=route, trainable=False, **fields).trainable is False
    with pytest.raises(ValidationError, match="only tinker routes are trainable"):
        ModelEntry(backend=route, trainable=True, **fields)


@pytest.mark.parametrize(
    ("route", "problem"),
    [
        ({}, "exactly one of base_model or model_path"),
        (
            {"base_model": "a", "model_path": "tinker://b"},
            "exactly one of base_model or model_path",
        ),
        ({"model_path": "s3://bucket/weights"}, "must be a tinker:// path"),
    ],
)
def test_tinker_route_names_exactly_one_tinker_target(route: dict[str, str], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        TinkerRoute(**route)


def test_registry_loads_from_json_and_reports_a_bad_file(tmp_path: Path) -> None:
    good = tmp_path / "models.json"
    good.write_text(
        json.dumps(
            [
                {
                    "id": "ckpt/s3",
                    "family": "qwen",
                    "context_window": 32768,
                    "max_output_tokens": 4096,
                    "backend": {"kind": "tinker", "model_path": "tinker://run-1/sampler/000003"},
                    "trainable": True,
                }
            ]
        )
    )
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": "x", "family": "llama"}]))

    assert ModelRegistry.from_json_file(good).get("ckpt/s3").context_window == 32768
    with pytest.raises(ValueError, match=r"bad\.json is not a valid model registry"):
        ModelRegistry.from_json_file(bad)


def test_model_list_matches_the_anthropic_sdk_shape() -> None:
    listing = ModelRegistry().model_list()

    parsed = [anthropic.types.ModelInfo.model_validate(info.model_dump()) for info in listing.data]

    assert parsed[0].id == "synth/qwen3-tiny" and parsed[0].max_input_tokens == 32_768
    assert (listing.first_id, listing.last_id) == ("synth/qwen3-tiny", "zai-org/GLM-5.3")
