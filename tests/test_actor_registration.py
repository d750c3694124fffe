"""An actor given as a file or inline JSON is registered when its run is submitted: by its
digest, once, and `synth profile show` answers for the actor of every run."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner, Result

from synth_pipelines.cli.main import app
from tests.agent_runs import one_task_dataset, profile_document, publish
from tests.conftest import PROJECT_ROOT
from tests.module_state import module_state

PLAN = f"@{PROJECT_ROOT / 'plans' / 'eval.json'}"


def synth(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def start(actor: str, key: str) -> Result:
    return synth(
        "run",
        "start",
        "--dataset",
        "test/one@v1",
        "--actor",
        actor,
        "--plan",
        PLAN,
        "--idempotency-key",
        key,
        "--json",
    )


def listed(noun: str) -> list[dict]:
    result = synth(noun, "list", "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def submitted(tmp_path_factory: pytest.TempPathFactory):
    """The same oracle file submitted twice, and the useless profile once inline."""
    tmp_path = tmp_path_factory.mktemp("actor-registration")
    with module_state(tmp_path):
        publish(one_task_dataset(tmp_path, "write-robots-txt"))
        actor = tmp_path / "actor.json"
        actor.write_text(json.dumps(profile_document("oracle.json"), indent=2))
        runs = []
        for actor_argument, key in (
            (f"@{actor}", "first"),
            (f"@{actor}", "second"),
            (json.dumps(profile_document("useless.json")), "inline"),
        ):
            result = start(actor_argument, key)
            assert result.exit_code == 0, result.stderr
            runs.append(json.loads(result.stdout))
        yield tmp_path, runs


def test_the_same_file_submitted_twice_registers_once(submitted):
    _, runs = submitted
    assert runs[0]["run_id"] != runs[1]["run_id"]
    assert all(run["created"] for run in runs)
    profiles = listed("profile")
    assert sorted(profile["ref"] for profile in profiles) == ["synth/oracle@1", "synth/useless@1"]
    (oracle,) = [profile for profile in profiles if profile["ref"] == "synth/oracle@1"]
    assert oracle["digest"] == runs[0]["actor_digest"] == runs[1]["actor_digest"]


def test_profile_show_answers_for_every_runs_actor(submitted):
    for run in listed("run"):
        shown = synth("profile", "show", run["actor"], "--json")
        assert shown.exit_code == 0, shown.stderr
        assert json.loads(shown.stdout)["digest"] == run["actor_digest"]


def test_profile_list_shows_registered_actors_whole(submitted):
    shown = synth("profile", "list")
    assert shown.exit_code == 0, shown.stderr
    assert "synth/oracle@1" in shown.stdout and "..." not in shown.stdout
    digest = "".join(
        cell.strip()
        for line in shown.stdout.splitlines()
        if "│" in line
        for cell in line.split("│")[4:5]
    )
    assert all(profile["digest"] in digest for profile in listed("profile"))


def test_other_bytes_under_a_registered_version_are_refused(submitted):
    tmp_path, _ = submitted
    before = listed("run")
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(profile_document("oracle.json", description="changed")))
    result = start(f"@{changed}", "changed")
    assert result.exit_code == 2, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "synth/oracle@1 is already published with digest" in lines[0]
    assert listed("run") == before
    assert len(listed("profile")) == 2
