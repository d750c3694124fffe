"""Evaluation and unscored execution share the trials path with training, but never
create an optimizer or datums; unscored execution leaves artifacts and no assessment."""

from collections import Counter

import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.table_outputs import current_table_ref
from tests.agent_runs import (
    accept,
    one_task_dataset,
    profile_document,
    publish,
    restored_trial,
    run_batches,
    trial_outcomes,
)
from tests.live_services import platform, set_script

ANSWER = (
    '<tool_call>\n{"name": "bash", "arguments": {"command": "echo 9.9.9 > VERSION"}}\n</tool_call>'
)
TRAINING_CALLS = (
    "/create_model",
    "/forward_backward",
    "/optim_step",
    "/save_weights",
    "/load_weights",
)


def counting(calls: Counter):
    def hook(app) -> None:
        @app.middleware("http")
        async def count(request, call_next):
            calls[request.url.path.removeprefix("/api/v1")] += 1
            return await call_next(request)

    return hook


def _run(kind: str, tmp_path, monkeypatch) -> tuple[object, Counter]:
    calls: Counter = Counter()
    with platform(monkeypatch, app_hook=counting(calls)) as (model_url, proxy):
        set_script(
            model_url,
            [
                {"match": "<tool_response>", "completion": "Done.", "repeat": True},
                {"completion": ANSWER, "repeat": True},
            ],
        )
        publish(one_task_dataset(tmp_path, "update-version-file"))
        run = run_batches(accept(profile_document("builtin.json"), kind=kind, attempts=2))
        proxy.flush()
    return run, calls


@pytest.mark.slow
def test_evaluation_never_creates_an_optimizer_or_datums(state, tmp_path, monkeypatch):
    run, calls = _run("eval", tmp_path, monkeypatch)
    key = batch_key(run.run_id, 0)
    assert run.status == "succeeded"
    assert calls["/asample"] >= 4
    assert not any(calls[path] for path in TRAINING_CALLS)
    engine = control_engine(Settings())
    assert current_table_ref(engine, "assessments", key) is not None
    for asset in ("qualified_groups", "datums"):
        assert current_table_ref(engine, asset, key) is None


@pytest.mark.slow
def test_unscored_execution_returns_artifacts_and_no_assessment(state, tmp_path, monkeypatch):
    run, calls = _run("execute", tmp_path, monkeypatch)
    key = batch_key(run.run_id, 0)
    assert run.status == "succeeded"
    assert not any(calls[path] for path in TRAINING_CALLS)
    assert current_table_ref(control_engine(Settings()), "assessments", key) is None
    outcomes: list[TrialOutcome] = trial_outcomes(run)
    assert len(outcomes) == 2
    for outcome in outcomes:
        assert outcome.rewards_json is None and outcome.artifacts_digest
        trial = restored_trial(outcome, tmp_path / outcome.attempt_id)
        assert (trial / "artifacts" / "app" / "VERSION").read_text() == "9.9.9\n"
        assert not (trial / "verifier" / "reward.txt").exists()
