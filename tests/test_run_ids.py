"""A run is named by its whole id or any prefix only one of the operator's runs starts with."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner, Result

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import RunRequest
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import accept_run, get_run
from tests.agent_runs import accept, one_task_dataset, profile_document, publish
from tests.module_state import module_state


def synth(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def one_error_line(result: Result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def unique_prefix(run_id: str, others: list[str]) -> str:
    """The shortest prefix of `run_id` that none of `others` starts with."""
    for length in range(3, len(run_id) + 1):
        if not any(other.startswith(run_id[:length]) for other in others):
            return run_id[:length]
    raise AssertionError(f"{run_id} has no unique prefix among {others}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """Three accepted runs of the operator, and one of another owner."""
    tmp_path = tmp_path_factory.mktemp("run-ids")
    with module_state(tmp_path):
        publish(one_task_dataset(tmp_path, "write-robots-txt"))
        mine = [accept(profile_document("oracle.json")) for _ in range(3)]
        request = RunRequest.model_validate(
            {**mine[0].spec.model_dump(include=set(RunRequest.model_fields)), "owner": "mallory"}
        )
        other, _ = accept_run(control_engine(Settings()), request, org="local")
        yield mine, other


def _ids(runs: list[RunRecord]) -> list[str]:
    return [run.run_id for run in runs]


def test_a_unique_prefix_names_the_run_in_every_command(runs):
    mine, _ = runs
    target = mine[0]
    prefix = unique_prefix(target.run_id, _ids(mine[1:]))
    assert prefix != target.run_id
    events = synth("run", "events", prefix, "--json")
    assert events.exit_code == 0, events.stderr
    first = json.loads(events.stdout.splitlines()[0])
    assert (first["run_id"], first["kind"]) == (target.run_id, "run.accepted")
    checkpoints = synth("run", "checkpoints", prefix, "--json")
    assert checkpoints.exit_code == 0, checkpoints.stderr
    assert json.loads(checkpoints.stdout) == []
    inspected = synth("train", "resolve", prefix, "--inspect", "--json")
    assert inspected.exit_code == 0, inspected.stderr
    assert json.loads(inspected.stdout) == []


def test_a_whole_id_still_names_its_run(runs):
    mine, _ = runs
    events = synth("run", "events", mine[1].run_id, "--json")
    assert events.exit_code == 0, events.stderr
    assert {json.loads(line)["run_id"] for line in events.stdout.splitlines()} == {mine[1].run_id}


def test_an_ambiguous_prefix_lists_the_operators_candidates(runs):
    mine, other = runs
    line = one_error_line(synth("run", "events", "r-"))
    assert "matches several runs" in line
    for run_id in _ids(mine):
        assert run_id in line
    assert other.run_id not in line


def test_an_unknown_prefix_is_one_line(runs):
    # Run ids are hexadecimal after `r-`: no run starts with `r-zz`.
    assert "no run 'r-zz'" in one_error_line(synth("run", "checkpoints", "r-zz"))


def test_another_owners_run_is_neither_resolved_by_prefix_nor_readable(runs):
    mine, other = runs
    prefix = unique_prefix(other.run_id, _ids(mine))
    assert f"no run {prefix!r}" in one_error_line(synth("run", "events", prefix))
    # A whole id of another owner's run is answered as one that does not exist.
    said = one_error_line(synth("run", "events", other.run_id))
    assert said == f"error: no run {other.run_id!r} of yours; `synth run list` shows them"


def test_cancel_by_prefix_cancels_that_run_only(runs):
    mine, _ = runs
    target = mine[2]
    prefix = unique_prefix(target.run_id, _ids(mine[:2]))
    cancelled = synth("run", "cancel", prefix, "--json")
    assert cancelled.exit_code == 0, cancelled.stderr
    document = json.loads(cancelled.stdout)
    assert (document["run_id"], document["cancelled"]) == (target.run_id, True)
    engine = control_engine(Settings())
    assert [get_run(engine, run_id).status for run_id in _ids(mine)] == [
        "accepted",
        "accepted",
        "cancelled",
    ]
