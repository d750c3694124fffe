"""Runs started, read and steered through the gateway: the owner is the API key's, another
owner's run is answered on every report and steer route exactly as one that does not exist,
admission is one transaction keyed by the owner's idempotency key (409 naming what
differs), and nothing is written for a refused request."""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.control import schema
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import get_run
from tests.agent_runs import one_task_dataset, profile_document, publish
from tests.conftest import LocalGateway
from tests.gateway_support import bearer

ORACLE = profile_document("oracle.json")


def _body(**changes: object) -> dict:
    return {"dataset": "test/one@v1", "actor": ORACLE, "plan": {"kind": "eval"}, **changes}


def _written() -> dict[str, int]:
    with control_engine(Settings()).connect() as connection:
        return {
            table.name: connection.scalar(select(func.count()).select_from(table))
            for table in (schema.runs, schema.run_events, schema.profile_versions)
        }


@pytest.fixture
def published(cli_gateway: LocalGateway, tmp_path) -> LocalGateway:
    publish(one_task_dataset(tmp_path, "write-robots-txt"))
    return cli_gateway


def test_a_run_is_the_keys_owners_whatever_the_environment_says(published, monkeypatch):
    published.act_as("alice", org="lab")
    monkeypatch.setenv("SYNTH_OWNER", "mallory")
    started = CliRunner().invoke(
        app,
        [
            "run",
            "start",
            "--dataset",
            "test/one@v1",
            "--actor",
            json.dumps(ORACLE),
            "--plan",
            '{"kind": "eval"}',
            "--json",
        ],
    )
    assert started.exit_code == 0, started.output
    accepted = json.loads(started.stdout)
    assert (accepted["owner"], accepted["created"]) == ("alice", True)
    run = get_run(control_engine(Settings()), accepted["run_id"])
    assert (run.owner, run.org) == ("alice", "lab")


def test_another_owners_run_is_404_like_none_on_every_report_and_steer(published):
    url = published.url
    bob = published.key("bob")
    alice = published.key("alice")
    made = httpx.post(f"{url}/v1/runs", json=_body(), headers=bearer(bob))
    assert made.status_code == 200, made.text
    theirs = made.json()["run_id"]
    before = _written()
    for method, path, body in (
        ("GET", "/results", None),
        ("GET", "/progress", None),
        ("GET", "/metrics", None),
        ("GET", "/checkpoints", None),
        ("GET", "/assessments", None),
        ("POST", "/cancel", {"reason": "alice says so"}),
        ("POST", "/resume", None),
    ):
        other = httpx.request(
            method, f"{url}/v1/runs/{theirs}{path}", json=body, headers=bearer(alice)
        )
        none = httpx.request(
            method, f"{url}/v1/runs/r-000000000000{path}", json=body, headers=bearer(alice)
        )
        assert other.status_code == none.status_code == 404, (path, other.text)
        assert other.json()["error"]["message"].replace(theirs, "ID") == none.json()["error"][
            "message"
        ].replace("r-000000000000", "ID")
    assert _written() == before
    assert get_run(control_engine(Settings()), theirs).status == "accepted"
    shown = httpx.get(f"{url}/v1/runs/{theirs}/results", headers=bearer(bob))
    assert shown.status_code == 200 and shown.json()["owner"] == "bob"


def test_the_same_key_answers_the_same_run_and_another_request_is_a_409(published):
    url, alice = published.url, published.key("alice")
    first = httpx.post(f"{url}/v1/runs", json=_body(idempotency_key="k1"), headers=bearer(alice))
    again = httpx.post(f"{url}/v1/runs", json=_body(idempotency_key="k1"), headers=bearer(alice))
    assert first.status_code == again.status_code == 200, (first.text, again.text)
    assert first.json()["run_id"] == again.json()["run_id"]
    assert (first.json()["created"], again.json()["created"]) == (True, False)
    before = _written()
    changed = _body(idempotency_key="k1", plan={"kind": "eval", "attempts_per_task": 3})
    conflict = httpx.post(f"{url}/v1/runs", json=changed, headers=bearer(alice))
    assert conflict.status_code == 409, conflict.text
    assert conflict.json()["error"]["type"] == "conflict_error"
    assert "attempts_per_task" in conflict.json()["error"]["message"]
    assert _written() == before
    # The key is the owner's own: another owner's same key is another run.
    bobs = httpx.post(f"{url}/v1/runs", json=changed, headers=bearer(published.key("bob")))
    assert bobs.status_code == 200 and bobs.json()["created"] is True


def test_refused_requests_write_nothing(published):
    url = published.url
    viewer = published.key("alice", role="viewer")
    operator = published.key("alice")
    before = _written()
    as_viewer = httpx.post(f"{url}/v1/runs", json=_body(), headers=bearer(viewer))
    assert as_viewer.status_code == 403, as_viewer.text
    no_key = httpx.post(f"{url}/v1/runs", json=_body())
    assert no_key.status_code == 401
    # The gateway never reads a file a client names: it could only be the gateway's own.
    for field in ("actor", "judge"):
        named = httpx.post(
            f"{url}/v1/runs", json=_body(**{field: "@/etc/passwd"}), headers=bearer(operator)
        )
        assert named.status_code == 422, named.text
        assert named.json()["error"]["message"].startswith(f"body.{field}")
    unknown = httpx.post(
        f"{url}/v1/runs", json=_body(dataset="test/none@v9"), headers=bearer(operator)
    )
    assert unknown.status_code == 400 and "test/none" in unknown.json()["error"]["message"]
    missing = httpx.post(
        f"{url}/v1/runs", json={"dataset": "test/one@v1"}, headers=bearer(operator)
    )
    assert missing.status_code == 422 and "actor" in missing.json()["error"]["message"]
    assert _written() == before
