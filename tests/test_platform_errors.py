"""No silent wrong numbers: an attempt the platform failed is not a failed attempt.

A run whose model nobody serves is refused before it is accepted; a model that stops
being served mid-run turns the attempts it strands into platform errors, excluded from
pass@1 and named with their reason, and `synth run compare` refuses such a run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine

from synth_pipelines.config import Settings
from synth_pipelines.contracts.outcome_classes import AGENT_OUTCOMES, TASK_ERRORS, error_class
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.runs import list_runs
from synth_pipelines.runtime.results import collect_results
from synth_pipelines.storage.objectstore import open_object_store
from tests.agent_runs import accept, profile_document, publish, run_batches
from tests.conftest import PROJECT_ROOT, serving_gateway
from tests.fault_injection import ModelServiceProcess
from tests.live_services import capture_proxy, platform
from tests.training_runs import (
    script_every_attempt_right,
    script_one_right_one_wrong,
    training_dataset,
)

SYNTH = [sys.executable, "-m", "synth_pipelines.cli"]


def synth(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SYNTH, *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=180,
    )


def test_an_exception_nobody_classified_is_the_platforms_never_the_policys() -> None:
    assert error_class(None) is None
    assert all(error_class(name) is None for name in AGENT_OUTCOMES)
    assert all(error_class(name) == "task" for name in TASK_ERRORS)
    assert error_class("ModelRouteError") == "platform"
    assert error_class("EnvironmentStartTimeoutError") == "platform"
    assert error_class("KeyError") == "platform"


@pytest.mark.slow
def test_a_run_whose_model_nobody_serves_is_refused_at_submission(state, tmp_path, monkeypatch):
    with platform(monkeypatch) as (model_url, _proxy):
        publish(training_dataset(tmp_path))
        start = ["run", "start", "--dataset", "test/one@v1", "--actor", "@profiles/builtin.json"]
        plan = ["--plan", "@plans/eval.json"]
        # Known to the proxy, but the model service behind its route does not serve it.
        unserved = synth(*start, *plan, "--model", "deepseek-ai/DeepSeek-V3.1")
        # Known to nobody.
        unknown = synth(*start, *plan, "--model", "nobody/knows-this-model")
        # A served model is accepted: the check is not a blanket refusal.
        served = synth(*start, "--plan", "@plans/eval.json", "--json")
    for result, fragments in (
        (
            unserved,
            (
                "actor model: model 'deepseek-ai/DeepSeek-V3.1' is not served",
                f"the model service at {model_url} serves synth/deepseek-tiny, synth/glm-tiny, "
                "synth/kimi-tiny, synth/qwen3-learner, synth/qwen3-tiny",
                "synth model serve --base-model deepseek-ai/DeepSeek-V3.1",
            ),
        ),
        (unknown, ("the capture proxy refuses model 'nobody/knows-this-model'",)),
    ):
        assert result.returncode == 2, result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        for fragment in fragments:
            assert fragment in lines[0], lines[0]
    assert served.returncode == 0, served.stderr
    accepted = list_runs(control_engine(Settings()))
    assert [run.run_id for run in accepted] == [json.loads(served.stdout)["run_id"]]
    # With the proxy down, nothing can be checked, and nothing is accepted either.
    monkeypatch.setenv("SYNTH_PROXY_URL", "http://127.0.0.1:9")
    with serving_gateway(monkeypatch):
        down = synth(*start, *plan)
    assert down.returncode == 2 and "is not reachable" in down.stderr, down.stderr
    assert len(list_runs(control_engine(Settings()))) == 1


def _struck_after_the_first_attempt(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: Callable[[str], None],
    strike: Callable[[ModelServiceProcess], None],
) -> tuple[Engine, RunRecord, RunRecord]:
    """A built-in agent's evaluation of two tasks, two attempts each, one at a time,
    through a model service of its own (scripted by `script`) behind a proxy that waits
    3 s for it; `strike` runs on the service beside the run once the first attempt has
    finished. The engine, the run accepted and the run as it ended."""
    service = ModelServiceProcess(tmp_path)
    service.start()
    try:
        with capture_proxy(service.url, backend_timeout_sec=3.0) as proxy:
            monkeypatch.setenv("SYNTH_PROXY_URL", proxy.url)
            monkeypatch.setenv("SYNTH_MODEL_SERVICE_URL", service.url)
            script(service.url)
            publish(training_dataset(tmp_path))
            run = accept(profile_document("builtin.json"), attempts=2)
            engine = control_engine(Settings())

            def strike_after_the_first_attempt() -> None:
                while not read_events(engine, run_id=run.run_id, kinds=("attempt.finished",)):
                    time.sleep(0.2)
                strike(service)

            striker = threading.Thread(target=strike_after_the_first_attempt, daemon=True)
            striker.start()
            finished = run_batches(run)
            striker.join(timeout=120)
    finally:
        service.stop()
    return engine, run, finished


@pytest.mark.slow
def test_a_model_that_disappears_mid_run_leaves_platform_errors_not_failures(
    state, cli_gateway, tmp_path, monkeypatch
):
    monkeypatch.setenv("SYNTH_PLATFORM_RETRY_DELAY_SEC", "0")
    engine, run, finished = _struck_after_the_first_attempt(
        tmp_path, monkeypatch, script_one_right_one_wrong, lambda service: service.kill()
    )
    results = collect_results(engine, open_object_store(Settings().objects_url), finished)
    summary = results.summary
    assert finished.status == "succeeded"
    assert summary.attempts == 4
    assert summary.assessed == 1 and summary.platform_errors == 3 and summary.task_errors == 0
    # The one assessed attempt solved its task; the stranded ones are not zeros.
    assert summary.pass_rate == 1.0
    (reason,) = summary.error_reasons
    assert reason.startswith("platform: ModelRouteError: the actor never reached its model")
    assert "500 api_error: the model backend did not answer within 3 s" in reason
    # Each stranded attempt was run once more (the plan's one platform retry), and failed
    # again: the model was still gone.
    finished_events = read_events(engine, run_id=run.run_id, kinds=("attempt.finished",))
    assert sorted(e.data["error_class"] or "" for e in finished_events) == ["", *["platform"] * 6]
    retried = [e.data["retried_as"] for e in finished_events if "retried_as" in e.data]
    assert sorted(retried) == sorted(
        f"{e.data['attempt_id']}.r1" for e in finished_events if "retried_as" in e.data
    )
    assert len(retried) == 3

    shown = synth("run", "show", run.run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["summary"]["platform_errors"] == 3
    assert document["summary"]["pass_rate"] == 1.0
    assert "3 of 4 attempts failed on the platform" in synth("run", "show", run.run_id).stderr

    compared = synth("run", "compare", run.run_id, run.run_id)
    assert compared.returncode == 1
    assert "3 platform error(s) in 4 attempts (75.0%), above --max-platform-errors" in (
        compared.stderr
    )
    forced = synth("run", "compare", run.run_id, run.run_id, "--max-platform-errors", "1", "--json")
    assert forced.returncode == 0, forced.stderr
    baseline = json.loads(forced.stdout)["baseline"]
    assert (baseline["assessed"], baseline["platform_errors"]) == (1, 3)


RETRY_DELAY_SEC = 30
"""Longer than the model service takes to start again, so an attempt stranded by the
restart runs again against the new incarnation."""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_model_service_restarted_mid_run_costs_only_its_in_flight_attempts_a_retry(
    state, tmp_path, monkeypatch
):
    monkeypatch.setenv("SYNTH_PLATFORM_RETRY_DELAY_SEC", str(RETRY_DELAY_SEC))
    restarted: list[float] = []

    def restart(service: ModelServiceProcess) -> None:
        began = time.monotonic()
        service.kill()
        service.start()
        script_every_attempt_right(service.url)
        restarted.append(time.monotonic() - began)

    engine, run, finished = _struck_after_the_first_attempt(
        tmp_path, monkeypatch, script_every_attempt_right, restart
    )
    assert restarted and restarted[0] < RETRY_DELAY_SEC, restarted
    summary = collect_results(engine, open_object_store(Settings().objects_url), finished).summary
    assert finished.status == "succeeded"
    assert (summary.attempts, summary.assessed, summary.platform_errors) == (4, 4, 0)
    assert summary.pass_rate == 1.0
    events = read_events(engine, run_id=run.run_id, kinds=("attempt.finished",))
    failed = [e.data for e in events if e.data["error_class"] == "platform"]
    # Only attempts the restart stranded ran again, each once, and each then passed.
    assert failed and all(data["retried_as"] == f"{data['attempt_id']}.r1" for data in failed)
    assessed = [e.data["attempt_id"] for e in events if e.data["error_class"] is None]
    assert len(assessed) == 4
    assert {data["retried_as"] for data in failed} <= set(assessed)
