"""Training or warm-starting a model served only for inference (an `openai_chat` or
`anthropic` route) is refused at submission: one line saying why, exit 2, nothing written."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.control import schema
from synth_pipelines.control.database import control_engine
from synth_pipelines.rendering.model_registry import (
    DEFAULT_MODELS,
    ModelEntry,
    ModelRegistry,
    OpenAIChatRoute,
)
from tests.agent_runs import one_task_dataset, publish
from tests.conftest import PROJECT_ROOT, serving_gateway
from tests.live_services import capture_proxy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

JUDGE_MODEL = "judges/chat-only"
JUDGE_ENTRY = ModelEntry(
    id=JUDGE_MODEL,
    family="qwen",
    context_window=8192,
    max_output_tokens=512,
    backend=OpenAIChatRoute(base_url="http://127.0.0.1:9/v1", model="served"),
    trainable=False,
)


def _written() -> dict[str, int]:
    with control_engine(Settings()).connect() as connection:
        return {
            table.name: connection.scalar(select(func.count()).select_from(table))
            for table in (schema.runs, schema.run_events, schema.profile_versions)
        }


@pytest.mark.parametrize(
    ("command", "plan"),
    [
        (["train", "start"], "train.json"),
        (["train", "start"], "warm-start.json"),
        (["run", "start"], "train.json"),
    ],
)
def test_training_an_inference_only_model_is_refused(state, tmp_path, monkeypatch, command, plan):
    publish(one_task_dataset(tmp_path, "update-version-file"))
    registry = ModelRegistry([*DEFAULT_MODELS, JUDGE_ENTRY])
    # Nothing behind the tinker routes: the refusal needs only the proxy's registry.
    with capture_proxy("http://127.0.0.1:9", registry=registry) as proxy:
        monkeypatch.setenv("SYNTH_PROXY_URL", proxy.url)
        before = _written()
        with serving_gateway(monkeypatch):
            refused = CliRunner().invoke(
                app,
                [
                    *command,
                    "--dataset",
                    "test/one@v1",
                    "--actor",
                    f"@{PROJECT_ROOT / 'profiles' / 'builtin.json'}",
                    "--plan",
                    f"@{PROJECT_ROOT / 'plans' / plan}",
                    "--model",
                    JUDGE_MODEL,
                ],
            )
        after = _written()

    assert refused.exit_code == 2, refused.output
    assert refused.stderr.count("\n") == 1
    assert f"model {JUDGE_MODEL!r} is served through a 'openai_chat' route" in refused.stderr
    assert "for inference only" in refused.stderr
    assert refused.stdout == ""
    assert after == before


def test_the_proxy_reports_the_route_as_not_trainable(state) -> None:
    registry = ModelRegistry([*DEFAULT_MODELS, JUDGE_ENTRY])
    info = json.loads(registry.get(JUDGE_MODEL).model_info().model_dump_json())
    assert (info["route"], info["trainable"], info["base_model"]) == ("openai_chat", False, None)
