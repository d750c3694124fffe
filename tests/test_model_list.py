"""`synth model list`: every served model with its family, limits, route and whether it can
be trained, as the gateway lists them; a registry file (`SYNTH_MODEL_REGISTRY`) adds entries
beside the built-in ones."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from synth_pipelines.cli.main import app
from synth_pipelines.contracts.documents import ServedModelDocument
from synth_pipelines.contracts.model_info import ModelInfo
from synth_pipelines.rendering.model_registry import ModelRegistry
from tests.conftest import serving_gateway

JUDGE = {
    "id": "judges/smollm2",
    "family": "qwen",
    "context_window": 8192,
    "max_output_tokens": 512,
    "trainable": False,
    "backend": {
        "kind": "openai_chat",
        "base_url": "http://127.0.0.1:8000/v1",
        "model": "SmolLM2-135M-Instruct",
        "api_key_env": "JUDGE_SERVER_KEY",
    },
}


def test_registry_file_adds_an_inference_only_route_beside_the_built_in_models(
    state, monkeypatch
) -> None:
    registry = state / "registry.json"
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text(json.dumps([JUDGE]))
    monkeypatch.setenv("SYNTH_MODEL_REGISTRY", str(registry))

    with serving_gateway(monkeypatch):
        listed = CliRunner().invoke(app, ["model", "list", "--json"])
        people = CliRunner().invoke(app, ["model", "list"])

    assert listed.exit_code == 0, listed.output
    models = {model["id"]: model for model in json.loads(listed.stdout)}
    assert models["judges/smollm2"] == {
        "id": "judges/smollm2",
        "display_name": "judges/smollm2",
        "family": "qwen",
        "max_input_tokens": 8192,
        "max_tokens": 512,
        "route": "openai_chat",
        "base_model": None,
        "trainable": False,
    }
    tiny = models["synth/qwen3-tiny"]
    assert (tiny["route"], tiny["trainable"], tiny["max_input_tokens"]) == ("tinker", True, 32768)

    assert people.exit_code == 0
    (line,) = [line for line in people.stdout.splitlines() if "judges/smollm2" in line]
    assert "openai_chat" in line and "no" in line


def test_the_document_is_the_proxy_models_entry() -> None:
    """`synth model list` shows the fields of `GET /v1/models`, named as there."""
    shown = set(ServedModelDocument.model_fields)
    assert shown <= set(ModelInfo.model_fields)
    info = ModelRegistry().get("synth/qwen3-tiny").model_info()
    ServedModelDocument.model_validate(info.model_dump(include=shown))


def test_an_invalid_registry_file_is_one_line_exit_2(state, monkeypatch) -> None:
    bad = state / "bad.json"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text(json.dumps([{**JUDGE, "trainable": True}]))
    monkeypatch.setenv("SYNTH_MODEL_REGISTRY", str(bad))

    with serving_gateway(monkeypatch):
        listed = CliRunner().invoke(app, ["model", "list"])

    assert listed.exit_code == 2
    assert listed.stderr.count("\n") == 1
    assert "only tinker routes are trainable" in listed.stderr


def test_a_viewer_lists_the_models_and_no_key_lists_none(cli_gateway, monkeypatch) -> None:
    cli_gateway.act_as("vera", role="viewer")
    listed = CliRunner().invoke(app, ["model", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert "synth/qwen3-tiny" in {model["id"] for model in json.loads(listed.stdout)}
    monkeypatch.setenv("SYNTH_API_KEY", "sk-synth-not-a-key")
    refused = CliRunner().invoke(app, ["model", "list"])
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1, refused.stderr
