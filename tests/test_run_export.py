"""`synth run export`: a run's outcomes, assessments and captured evidence, read back
with polars as a researcher would."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner, Result

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.database import control_engine
from synth_pipelines.evidence.publisher import EvidencePublisher
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.storage.objectstore import LocalObjectStore, open_object_store
from tests.agent_runs import evaluate, one_task_dataset, profile_document, trial_outcomes
from tests.conftest import operator_key
from tests.evidence_calls import interaction
from tests.module_state import module_state


def synth(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def export(run_id: str, what: str, out: Path, file_format: str = "parquet") -> dict:
    result = synth(
        "run",
        "export",
        run_id,
        "--what",
        what,
        "--format",
        file_format,
        "--out",
        str(out),
        "--json",
    )
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def _publish_calls(run_id: str, outcomes: list[TrialOutcome], spool_dir: Path) -> None:
    """Each attempt's model calls, published as the proxy publishes them, with token ids
    and logprobs that differ from call to call."""
    store = open_object_store(Settings().objects_url)
    publisher = EvidencePublisher(Spool(spool_dir), store, control_engine(Settings()))
    for number, outcome in enumerate(outcomes):
        for index in range(2):
            first = 1000 * number + 10 * index
            publisher.spool.stage(
                interaction(f"{outcome.attempt_id}-{index}", call_index=index).model_copy(
                    update={
                        "run_id": run_id,
                        "batch": outcome.batch,
                        "attempt_id": outcome.attempt_id,
                        "trial_id": outcome.trial_id,
                        "prompt_tokens": list(range(first, first + 5 + index)),
                        "completion_tokens": [first + 7, first + 8],
                        "logprobs": [-0.5 - number, -0.25 * index],
                    }
                )
            )
    assert len(publisher.publish_pending(everything=True)) == len(outcomes)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory):
    """An oracle evaluation of one task, two attempts, each with two captured calls."""
    tmp_path = tmp_path_factory.mktemp("run-export")
    with module_state(tmp_path) as state:
        run = evaluate(
            one_task_dataset(tmp_path, "write-robots-txt"),
            profile_document("oracle.json"),
            attempts=2,
        )
        assert run.status == "succeeded"
        outcomes = trial_outcomes(run)
        _publish_calls(run.run_id, outcomes, state / "test-spool")
        yield run, outcomes, tmp_path


def test_outcomes_are_one_row_per_attempt(evaluated):
    run, outcomes, tmp_path = evaluated
    document = export(run.run_id, "outcomes", tmp_path / "outcomes.parquet")
    frame = pl.read_parquet(tmp_path / "outcomes.parquet")
    assert document["path"] == str((tmp_path / "outcomes.parquet").resolve())
    assert document["rows"] == frame.height == len(outcomes) == 2
    assert frame.columns == document["columns"] == list(TrialOutcome.model_fields)
    assert sorted(frame["attempt_id"]) == sorted(o.attempt_id for o in outcomes)


def test_assessments_carry_each_attempts_reward(evaluated):
    run, outcomes, tmp_path = evaluated
    export(run.run_id, "assessments", tmp_path / "assessments.parquet")
    frame = pl.read_parquet(tmp_path / "assessments.parquet")
    assert frame.columns == list(Assessment.model_fields)
    assert sorted(frame["attempt_id"]) == sorted(o.attempt_id for o in outcomes)
    assert frame["reward"].to_list() == [1.0, 1.0] and frame["valid"].all()


def _captured(outcomes: list[TrialOutcome]) -> dict[str, Interaction]:
    store = open_object_store(Settings().objects_url)
    evidence = read_attempt_evidence(
        control_engine(Settings()), store, [outcome.attempt_id for outcome in outcomes]
    )
    assert evidence.problems == {}
    return {call.call_id: call for calls in evidence.calls.values() for call in calls}


def test_evidence_rows_hold_the_token_ids_and_logprobs_the_reader_returns(evaluated):
    run, outcomes, tmp_path = evaluated
    # A prefix of the id names the run here as everywhere.
    document = export(run.run_id[:8], "evidence", tmp_path / "evidence.parquet")
    assert document["run_id"] == run.run_id
    frame = pl.read_parquet(tmp_path / "evidence.parquet")
    assert frame.schema["prompt_tokens"] == pl.List(pl.Int64)
    assert frame.schema["logprobs"] == pl.List(pl.Float64)
    captured = _captured(outcomes)
    assert sorted(frame["call_id"]) == sorted(captured) and len(captured) == 4
    for row in frame.iter_rows(named=True):
        call = captured[row["call_id"]]
        assert row["prompt_tokens"] == call.prompt_tokens
        assert row["completion_tokens"] == call.completion_tokens
        assert row["logprobs"] == call.logprobs
        assert row["attempt_id"] == call.attempt_id


def test_csv_evidence_encodes_token_lists_as_json(evaluated):
    run, outcomes, tmp_path = evaluated
    document = export(run.run_id, "evidence", tmp_path / "evidence.csv", "csv")
    frame = pl.read_csv(tmp_path / "evidence.csv")
    assert document["rows"] == frame.height == 4
    captured = _captured(outcomes)
    for row in frame.iter_rows(named=True):
        call = captured[row["call_id"]]
        assert json.loads(row["prompt_tokens"]) == call.prompt_tokens
        assert json.loads(row["logprobs"]) == call.logprobs


def test_the_default_file_is_named_for_the_run_and_table(evaluated, monkeypatch):
    run, _, tmp_path = evaluated
    here = tmp_path / "default"
    here.mkdir()
    monkeypatch.chdir(here)
    result = synth("run", "export", run.run_id, "--what", "outcomes")
    assert result.exit_code == 0, result.stderr
    written = here / f"{run.run_id}-outcomes.parquet"
    assert f"wrote 2 outcomes row(s) of {run.run_id} to {written}" in result.stdout
    assert pl.read_parquet(written).height == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--what", "datums"], "--what 'datums' is not one of outcomes, assessments, evidence"),
        (["--what", "outcomes", "--format", "xlsx"], "--format 'xlsx' is not one of parquet, csv"),
        (["--what", "outcomes", "--out", "missing/x.parquet"], "does not exist"),
    ],
)
def test_bad_arguments_are_one_line_and_write_nothing(evaluated, monkeypatch, args, message):
    run, _, tmp_path = evaluated
    here = tmp_path / "refused"
    here.mkdir(exist_ok=True)
    monkeypatch.chdir(here)
    result = synth("run", "export", run.run_id, *args)
    assert result.exit_code == 2, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert list(here.rglob("*")) == []


def test_another_owner_cannot_export_the_run(evaluated, monkeypatch):
    run, _, tmp_path = evaluated
    out = tmp_path / "bob.parquet"
    monkeypatch.setenv("SYNTH_API_KEY", operator_key("bob"))
    result = synth("run", "export", run.run_id, "--what", "evidence", "--out", str(out))
    assert result.exit_code == 2 and f"no run {run.run_id!r} of yours" in result.stderr
    assert not out.exists()


def test_evidence_that_fails_its_check_exports_nothing(evaluated):
    run, _, tmp_path = evaluated
    store = open_object_store(Settings().objects_url)
    assert isinstance(store, LocalObjectStore)
    chunk = store.file(next(store.list(f"evidence/{run.run_id}/")))
    kept = chunk.read_bytes()
    exports = set(store.list(f"runs/{run.run_id}/exports/"))
    out = tmp_path / "tampered.parquet"
    chunk.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))
    try:
        result = synth("run", "export", run.run_id, "--what", "evidence", "--out", str(out))
    finally:
        chunk.write_bytes(kept)
    assert result.exit_code == 1, result.stdout
    assert "cannot be read back" in result.stderr and "nothing was exported" in result.stderr
    assert not out.exists() and set(store.list(f"runs/{run.run_id}/exports/")) == exports
