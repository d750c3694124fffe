"""Judges: a judge profile assesses declared outputs in the separate verifier environment,
with its own scoped model access; its calls are captured as the judge's, never as the
actor's; regrade assesses retained work again without running the actor."""

import json

import dagster as dg
import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.contracts.table import parquet_to_table
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import get_run
from synth_pipelines.control.table_outputs import table_history
from synth_pipelines.definitions import definitions
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.runtime.assessment_comparison import agreements, assessment_sets
from synth_pipelines.runtime.regrade import RegradeRefusedError, check_regradable, task_dirs_for
from synth_pipelines.storage.objectstore import open_object_store
from tests.agent_runs import (
    accept,
    evaluate,
    one_task_dataset,
    profile_document,
    publish,
    trial_outcomes,
)
from tests.live_services import platform, set_script


def verdict(reward: int, why: str) -> str:
    command = (
        f"echo '{{\"reward\": {reward}}}' > /logs/verifier/reward.json; "
        f"echo '{why}' > /logs/verifier/rationale.md"
    )
    call = json.dumps({"name": "bash", "arguments": {"command": command}})
    return f"<tool_call>\n{call}\n</tool_call>"


def judge_script(model_url: str) -> None:
    set_script(
        model_url,
        [
            {"match": "<tool_response>", "completion": "Verdict written.", "repeat": True},
            {
                "match": "STRICT",
                "completion": verdict(0, "strict: not convinced"),
                "repeat": True,
            },
            {
                "match": "assessing another agent",
                "completion": verdict(1, "VERSION holds the release"),
                "repeat": True,
            },
        ],
    )


def judge(strict: bool = False) -> dict:
    document = profile_document("judge.json")
    if strict:
        args = [*document["args"][:-1], document["args"][-1] + " You are STRICT."]
        document = {**document, "name": "synth/strict-judge", "args": args}
    return document


def _assessments(run, version: int = -1) -> list[Assessment]:
    engine, store = control_engine(Settings()), open_object_store(Settings().objects_url)
    ref = table_history(engine, "assessments", batch_key(run.run_id, 0))[version]
    return Assessment.from_table(parquet_to_table(store.get(ref.key, expected_sha256=ref.sha256)))


@pytest.mark.slow
def test_evaluation_with_an_explicit_judge(state, tmp_path, monkeypatch):
    with platform(monkeypatch) as (model_url, proxy):
        judge_script(model_url)
        run = evaluate(
            one_task_dataset(tmp_path, "update-version-file"),
            profile_document("oracle.json"),
            judge=judge(),
        )
        proxy.flush()
    assert run.status == "succeeded"
    (verdict,) = _assessments(run)
    assert verdict.assessor == "judge:synth/judge@1" and verdict.reward == 1.0
    assert verdict.rationale.strip() == "VERSION holds the release"
    (outcome,) = trial_outcomes(run)
    calls = read_attempt_evidence(
        control_engine(Settings()), open_object_store(Settings().objects_url), [outcome.attempt_id]
    ).calls[outcome.attempt_id]
    assert calls and {c.role for c in calls} == {"judge"}


def _regrade(run, judge_document: dict | None, regrade_id: str) -> dg.ExecuteInProcessResult:
    pinned = PinnedProfile.from_document(judge_document) if judge_document else None
    config = {"regrade_id": regrade_id, "judge": pinned.model_dump_json() if pinned else ""}
    return (
        definitions(Settings())
        .resolve_job_def("evaluation_batch")
        .execute_in_process(
            partition_key=batch_key(run.run_id, 0),
            instance=dg.DagsterInstance.get(),
            asset_selection=[dg.AssetKey("assessments")],
            run_config={"ops": {"batch": {"config": config}}},
        )
    )


@pytest.mark.slow
def test_regrade_assesses_retained_work_without_running_the_actor(state, tmp_path, monkeypatch):
    with platform(monkeypatch) as (model_url, _proxy):
        judge_script(model_url)
        run = evaluate(
            one_task_dataset(tmp_path, "update-version-file"), profile_document("oracle.json")
        )
        (outcome,) = trial_outcomes(run)
        assert _regrade(run, judge(), "rg-lenient").success
        assert _regrade(run, judge(strict=True), "rg-strict").success
    engine = control_engine(Settings())
    assert len(table_history(engine, "trials", batch_key(run.run_id, 0))) == 1
    assert trial_outcomes(run) == [outcome]
    by_verifier, lenient, strict = (_assessments(run, n)[0] for n in range(3))
    assert by_verifier.assessor == "task-verifier" and by_verifier.reward == 1.0
    assert (lenient.reward, strict.reward) == (1.0, 0.0)
    for verdict in (lenient, strict):
        assert verdict.source_trial_id == outcome.trial_id
        assert verdict.artifacts_digest == outcome.artifacts_digest
    sets = assessment_sets(
        engine, open_object_store(Settings().objects_url), get_run(engine, run.run_id)
    )
    assert [s.label for s in sets] == [
        "task-verifier (in trial)",
        "judge:synth/judge@1 (rg-lenient)",
        "judge:synth/strict-judge@1 (rg-strict)",
    ]
    rates = {(a.first, a.second): a.rate for a in agreements(sets)}
    assert rates[("task-verifier (in trial)", "judge:synth/judge@1 (rg-lenient)")] == 1.0
    assert (
        rates[("judge:synth/judge@1 (rg-lenient)", "judge:synth/strict-judge@1 (rg-strict)")] == 0.0
    )


def test_a_task_whose_verifier_needs_the_live_environment_is_refused(state, tmp_path):
    dataset = one_task_dataset(tmp_path, "update-version-file")
    config = dataset / "update-version-file" / "task.toml"
    config.write_text(
        config.read_text().replace('environment_mode = "separate"', 'environment_mode = "shared"')
    )
    engine, store = control_engine(Settings()), open_object_store(Settings().objects_url)
    publish(dataset)
    run = accept(profile_document("oracle.json"))
    with pytest.raises(
        RegradeRefusedError, match="task synth/update-version-file cannot be regraded"
    ):
        check_regradable(task_dirs_for(engine, store, run.spec, 0, tmp_path / "work"))
