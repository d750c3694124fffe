"""Resolving a training run's unresolved update, regrading a run and reading checkpoints,
through the gateway: each route answers another owner's run, regrade or checkpoint exactly
as one that does not exist and writes nothing, a viewer's key cannot resolve or regrade,
and `synth train resolve`, `synth run regrade` and `synth checkpoint list|show` speak to
the gateway alone."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner, Result

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.documents import validated
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control import schema
from synth_pipelines.control.checkpoints import record_checkpoint
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events, record_event
from synth_pipelines.control.policy_updates import mark_unresolved, unresolved_updates
from synth_pipelines.control.regrades import record_regrade, run_regrades
from tests.conftest import LocalGateway
from tests.gateway_support import bearer
from tests.production_services import free_port
from tests.recorded_batches import accept_recorded_training, record_batch
from tests.test_run_summary import ATTEMPTS, _record, _run

NONE = "r-000000000000"


@dataclass(frozen=True)
class Bobs:
    """Bob's training run stopped at an unresolved update of batch 1, with the checkpoint
    of batch 0; his evaluation whose three batches' trials are retained; the gateway."""

    training: RunRecord
    checkpoint: Checkpoint
    evaluation: RunRecord
    gateway: LocalGateway


@pytest.fixture
def dagster_down(monkeypatch) -> str:
    """A Dagster webserver URL nothing listens on, for the gateway served after this."""
    url = f"http://127.0.0.1:{free_port()}/dagster"
    monkeypatch.setenv("SYNTH_DAGSTER_URL", url)
    return url


@pytest.fixture
def bobs(dagster_down, cli_gateway: LocalGateway, tmp_path, monkeypatch) -> Bobs:
    monkeypatch.setenv("SYNTH_OWNER", "bob")
    engine = control_engine(Settings())
    training = accept_recorded_training(tmp_path)
    record_batch(training, 0)
    mark_unresolved(engine, training.run_id, batch_key(training.run_id, 1), 1, datums=4)
    checkpoint = record_checkpoint(
        engine,
        Checkpoint(
            sampler_path=f"tinker://{training.run_id}:train:0/sampler_weights/b0000",
            run_id=training.run_id,
            batch=batch_key(training.run_id, 0),
            batch_index=0,
            state_path=f"tinker://{training.run_id}/state/0",
            base_model="synth/qwen3-tiny",
            owner="bob",
            dataset_cursor=1,
            optimizer_steps=1,
            created_at=datetime.now(UTC),
        ),
    )
    evaluation = _run(tmp_path / "evaluation")
    for index in range(evaluation.batch_count):
        _record(evaluation, index, [1.0] + [0.0] * (ATTEMPTS - 1))
    monkeypatch.delenv("SYNTH_OWNER")
    return Bobs(training, checkpoint, evaluation, cli_gateway)


def _written() -> dict[str, int]:
    with control_engine(Settings()).connect() as connection:
        return {
            table.name: connection.scalar(select(func.count()).select_from(table))
            for table in (
                schema.run_events,
                schema.policy_updates,
                schema.regrades,
                schema.checkpoints,
            )
        }


def _synth(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _one_error_line(result: Result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_another_owners_run_regrade_and_checkpoint_are_404_like_none(bobs):
    url, alice = bobs.gateway.url, bobs.gateway.key("alice")
    training, evaluation = bobs.training.run_id, bobs.evaluation.run_id
    engine = control_engine(Settings())
    regrade = record_regrade(engine, evaluation, "task-verifier", None, 3)
    before = _written()
    for method, path, body in (
        ("GET", "/unresolved", None),
        ("POST", "/resolution", {"note": "alice says so"}),
        ("POST", "/regrades", {}),
        ("GET", f"/regrades/{regrade.regrade_id}/progress", None),
    ):
        theirs = training if "regrade" not in path else evaluation
        other = httpx.request(
            method, f"{url}/v1/runs/{theirs}{path}", json=body, headers=bearer(alice)
        )
        none = httpx.request(
            method, f"{url}/v1/runs/{NONE}{path}", json=body, headers=bearer(alice)
        )
        assert other.status_code == none.status_code == 404, (path, other.text)
        assert other.json()["error"]["message"].replace(theirs, "ID") == none.json()["error"][
            "message"
        ].replace(NONE, "ID")
    # A regrade is found only under its own run.
    bob = bobs.gateway.key("bob")
    elsewhere = httpx.get(
        f"{url}/v1/runs/{training}/regrades/{regrade.regrade_id}/progress", headers=bearer(bob)
    )
    assert elsewhere.status_code == 404, elsewhere.text

    listed = httpx.get(f"{url}/v1/checkpoints", headers=bearer(alice))
    assert listed.status_code == 200 and listed.json() == []
    of_run = httpx.get(f"{url}/v1/checkpoints", params={"run": training}, headers=bearer(alice))
    of_none = httpx.get(f"{url}/v1/checkpoints", params={"run": NONE}, headers=bearer(alice))
    assert of_run.status_code == of_none.status_code == 404
    assert of_run.json()["error"]["message"].replace(training, "ID") == of_none.json()["error"][
        "message"
    ].replace(NONE, "ID")
    path = bobs.checkpoint.sampler_path
    unknown = path.replace(training, NONE)
    shown = httpx.get(f"{url}/v1/checkpoints/{path}", headers=bearer(alice))
    never = httpx.get(f"{url}/v1/checkpoints/{unknown}", headers=bearer(alice))
    assert shown.status_code == never.status_code == 404
    assert shown.json()["error"]["message"].replace(path, "ID") == never.json()["error"][
        "message"
    ].replace(unknown, "ID")
    assert _written() == before
    assert [u.batch for u in unresolved_updates(engine, training)] == [batch_key(training, 1)]


def test_a_viewer_can_read_but_neither_resolve_nor_regrade(bobs):
    url, viewer = bobs.gateway.url, bobs.gateway.key("bob", role="viewer")
    training, evaluation = bobs.training.run_id, bobs.evaluation.run_id
    before = _written()
    for path, body in ((f"{training}/resolution", {}), (f"{evaluation}/regrades", {})):
        refused = httpx.post(f"{url}/v1/runs/{path}", json=body, headers=bearer(viewer))
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["type"] == "permission_error"
    assert _written() == before
    read = httpx.get(f"{url}/v1/runs/{training}/unresolved", headers=bearer(viewer))
    assert read.status_code == 200 and [u["batch"] for u in read.json()] == [batch_key(training, 1)]
    # The gateway never reads a file a client names as the judge.
    operator = bobs.gateway.key("bob")
    named = httpx.post(
        f"{url}/v1/runs/{evaluation}/regrades",
        json={"judge": "@/etc/passwd"},
        headers=bearer(operator),
    )
    assert named.status_code == 422 and named.json()["error"]["message"].startswith("body.judge")
    assert _written() == before


def test_train_resolve_inspects_then_discards_through_the_gateway(bobs):
    bobs.gateway.act_as("bob")
    run_id = bobs.training.run_id
    unresolved = batch_key(run_id, 1)
    inspected = _synth("train", "resolve", run_id[:10], "--inspect", "--json")
    assert inspected.exit_code == 0, inspected.output
    document = json.loads(inspected.stdout)
    assert document == validated("train resolve --inspect", document)
    assert [(u["batch"], u["status"], u["datums"]) for u in document] == [
        (unresolved, "unresolved", 4)
    ]
    text = _synth("train", "resolve", run_id, "--inspect")
    assert text.stdout.startswith(f"{unresolved}: unresolved since "), text.output
    discarded = _synth("train", "resolve", run_id, "--discard", "--note", "worker died", "--json")
    assert discarded.exit_code == 0, discarded.output
    decided = json.loads(discarded.stdout)
    assert decided == validated("train resolve", decided)
    assert (decided["batch"], decided["status"]) == (unresolved, "discarded")
    assert decided["resolution"].endswith("(worker died)")
    again = _one_error_line(_synth("train", "resolve", run_id, "--applied", "tinker://s"))
    assert f"run {run_id} has no unresolved policy update" in again
    assert _synth("train", "resolve", run_id, "--inspect").stdout.strip() == (
        f"{run_id} has no unresolved update"
    )
    bobs.gateway.act_as("alice")
    refused = _one_error_line(_synth("train", "resolve", run_id, "--discard"))
    assert f"no run {run_id!r} of yours" in refused
    assert read_events(control_engine(Settings()), run_id=run_id, kinds=("update.discarded",))


def test_checkpoint_list_and_show_through_the_gateway(bobs):
    bobs.gateway.act_as("bob")
    path = bobs.checkpoint.sampler_path
    listed = _synth("checkpoint", "list", "--run", bobs.training.run_id[:10], "--json")
    assert listed.exit_code == 0, listed.output
    document = json.loads(listed.stdout)
    assert document == validated("checkpoint list", document)
    assert [c["sampler_path"] for c in document] == [path]
    text = _synth("checkpoint", "list").stdout
    first_column = "".join(
        line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")
    )
    assert first_column == path
    shown = _synth("checkpoint", "show", path.rsplit("/", 1)[1], "--json")
    assert shown.exit_code == 0, shown.output
    lineage = json.loads(shown.stdout)
    assert lineage == validated("checkpoint show", lineage)
    assert lineage["checkpoint"]["sampler_path"] == path
    assert lineage["update"]["status"] == "acknowledged"
    text = _synth("checkpoint", "show", path)
    assert text.exit_code == 0 and "produced by run" in text.stdout, text.output
    unknown = _one_error_line(_synth("checkpoint", "show", "tinker://nowhere/sampler_weights/x"))
    assert "no checkpoint of yours matches 'tinker://nowhere/sampler_weights/x'" in unknown
    bobs.gateway.act_as("alice")
    assert "no checkpoint of yours matches" in _one_error_line(_synth("checkpoint", "show", path))
    assert json.loads(_synth("checkpoint", "list", "--json").stdout) == []


def test_run_regrade_is_requested_through_the_gateway_and_its_progress_counted(bobs, dagster_down):
    bobs.gateway.act_as("bob")
    run = bobs.evaluation
    # The gateway checks the run's retained work, records the regrade, then asks the
    # Dagster webserver for its backfill: down here, so the request is refused, on record.
    refused = _synth("run", "regrade", run.run_id, "--json")
    said = _one_error_line(refused)
    assert f"the Dagster webserver at {dagster_down} is not reachable" in said
    assert json.loads(refused.stdout)["exit_code"] == 2
    (regrade,) = run_regrades(control_engine(Settings()), run.run_id)
    assert (regrade.assessor, regrade.backfill_id) == ("task-verifier", None)
    (not_launched,) = read_events(
        control_engine(Settings()), run_id=run.run_id, kinds=("regrade.not_launched",)
    )
    assert not_launched.data["regrade_id"] == regrade.regrade_id

    record_event(
        control_engine(Settings()),
        run.run_id,
        "regrade.batch_assessed",
        {
            "regrade_id": regrade.regrade_id,
            "batch": batch_key(run.run_id, 0),
            "attempts": ATTEMPTS,
            "assessed": ATTEMPTS,
            "passed": 1,
        },
    )
    progress = httpx.get(
        f"{bobs.gateway.url}/v1/runs/{run.run_id}/regrades/{regrade.regrade_id}/progress",
        headers=bearer(bobs.gateway.key("bob", role="viewer")),
    )
    assert progress.status_code == 200, progress.text
    counts = progress.json()
    assert counts == validated("run progress", counts)
    assert (counts["kind"], counts["status"]) == ("regrade", "NOT_LAUNCHED")
    assert (counts["batches_done"], counts["batches_total"]) == (1, run.batch_count)
    assert (counts["attempts_done"], counts["passed"]) == (ATTEMPTS, 1)

    bobs.gateway.act_as("alice")
    other = _one_error_line(_synth("run", "regrade", run.run_id))
    assert f"no run {run.run_id!r} of yours" in other
    assert len(run_regrades(control_engine(Settings()), run.run_id)) == 1
