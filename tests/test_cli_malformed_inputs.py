"""Malformed task packages, datasets, profiles and plans given to the `synth` CLI.

Each is refused with exit code 2 and one line naming what was wrong, never a traceback, and
leaves the control database and the object store as they were; with `--json` the refusal is
also the `error` JSON document on stdout.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from synth_pipelines.cli.main import app
from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET

pytestmark = pytest.mark.usefixtures("cli_gateway")

SAMPLE_TASK = SAMPLE_DATASET / "add-default-argument"
TASK_TOML = (SAMPLE_TASK / "task.toml").read_text()


def synth(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def assert_refused(result: Result, *fragments: str) -> str:
    """Exit 2, no exception escaped, one stderr line holding every fragment; returns it."""
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), result.exception
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def stored_objects(state: Path) -> set[Path]:
    objects = state / "objects"
    return {path for path in objects.rglob("*") if path.is_file()} if objects.exists() else set()


def assert_nothing_recorded(state: Path) -> None:
    assert stored_objects(state) == set()
    for noun in ("dataset", "profile", "run"):
        listed = synth(noun, "list", "--json")
        assert listed.exit_code == 0, listed.stderr
        assert json.loads(listed.stdout) == [], noun


def task_dir(parent: Path, name: str = "the-task") -> Path:
    task = parent / name
    shutil.copytree(SAMPLE_TASK, task)
    return task


def publish(directory: Path, *extra: str) -> Result:
    return synth("dataset", "publish", str(directory), "--name", "t/bad", "--version", "v1", *extra)


# Task packages and datasets.


def test_task_toml_with_a_syntax_error_is_refused(state, tmp_path):
    task = task_dir(tmp_path / "ds")
    (task / "task.toml").write_text('schema_version = "1.4"\n[agent\ntimeout_sec = 3\n')
    assert_refused(publish(tmp_path / "ds"), "the-task/task.toml", "not valid TOML")
    assert_nothing_recorded(state)


def test_task_toml_with_a_wrong_type_is_refused_naming_the_field(state, tmp_path):
    task = task_dir(tmp_path / "ds")
    (task / "task.toml").write_text(TASK_TOML.replace("timeout_sec = 120", 'timeout_sec = "slow"'))
    assert_refused(publish(tmp_path / "ds"), "task.toml", "agent.timeout_sec", "valid number")
    assert_nothing_recorded(state)


def test_task_section_without_a_name_is_refused(state, tmp_path):
    task = task_dir(tmp_path / "ds")
    (task / "task.toml").write_text('schema_version = "1.4"\n[task]\ndescription = "x"\n')
    assert_refused(publish(tmp_path / "ds"), "task.toml", "task.name", "Field required")
    assert_nothing_recorded(state)


def test_task_toml_without_sections_takes_harbors_defaults_and_the_directory_name(state, tmp_path):
    """Harbor makes every section optional and names such a task after its directory."""
    task = task_dir(tmp_path / "ds")
    (task / "task.toml").write_text('schema_version = "1.4"\n')
    published = publish(tmp_path / "ds", "--json")
    assert published.exit_code == 0, published.stderr
    shown = json.loads(synth("dataset", "show", "t/bad@v1", "--json").stdout)
    assert [entry["name"] for entry in shown["tasks"]] == ["the-task"]


def test_task_without_instruction_md_is_refused(state, tmp_path):
    task = task_dir(tmp_path / "ds")
    (task / "instruction.md").unlink()
    assert_refused(publish(tmp_path / "ds"), "the-task", "missing instruction.md")
    assert_nothing_recorded(state)


def test_task_without_a_tests_directory_is_refused(state, tmp_path):
    task = task_dir(tmp_path / "ds")
    shutil.rmtree(task / "tests")
    assert_refused(publish(tmp_path / "ds"), "the-task", "tests/test.sh")
    assert_nothing_recorded(state)


def test_task_toml_of_binary_garbage_is_refused(state, tmp_path):
    task = task_dir(tmp_path / "ds")
    (task / "task.toml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe garbage")
    assert_refused(publish(tmp_path / "ds"), "the-task", "not UTF-8 text")
    assert_nothing_recorded(state)


def test_empty_dataset_directory_is_refused(state, tmp_path):
    (tmp_path / "empty").mkdir()
    assert_refused(publish(tmp_path / "empty"), "holds no task directories")
    assert_nothing_recorded(state)


def test_dataset_with_two_tasks_of_the_same_name_is_refused(state, tmp_path):
    task_dir(tmp_path / "ds", "first")
    task_dir(tmp_path / "ds", "second")
    assert_refused(publish(tmp_path / "ds"), "task names appear twice", "add-default-argument")
    assert_nothing_recorded(state)


def test_dataset_path_that_is_a_file_is_refused(state, tmp_path):
    path = tmp_path / "tasks.txt"
    path.write_text("not a directory\n")
    assert_refused(publish(path), "tasks.txt", "not a directory")
    assert_nothing_recorded(state)


def test_dataset_path_that_does_not_exist_is_refused(state, tmp_path):
    assert_refused(publish(tmp_path / "missing"), "missing", "not a directory")
    assert_nothing_recorded(state)


def test_task_file_linking_out_of_the_task_is_refused(state, tmp_path):
    task = task_dir(tmp_path / "ds")
    secret = tmp_path / "operator-secret.txt"
    secret.write_text("hunter2\n")
    (task / "tests" / "leak.txt").symlink_to(secret)
    assert_refused(publish(tmp_path / "ds"), "must stay within the task", "leak.txt")
    assert_nothing_recorded(state)


@pytest.mark.parametrize(
    ("source", "reason"),
    [("../outside.txt", "resolves outside the build context"), ("missing.txt", "is not in")],
)
def test_task_copying_what_its_build_context_lacks_is_refused(state, tmp_path, source, reason):
    """Such a task used to publish, then fail every attempt (and its whole batch)."""
    task = task_dir(tmp_path / "ds")
    (task / "outside.txt").write_text("outside\n")
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + f"COPY {source} /app/\n")
    assert_refused(publish(tmp_path / "ds"), "Dockerfile", source, reason)
    assert_nothing_recorded(state)


def test_task_directory_linking_out_of_the_dataset_is_refused(state, tmp_path):
    outside = task_dir(tmp_path / "elsewhere")
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "the-task").symlink_to(outside)
    assert_refused(publish(tmp_path / "ds"), "outside", "copy the task in")
    assert_nothing_recorded(state)


def test_dataset_refusal_with_json_prints_the_error_document(state, tmp_path):
    result = publish(tmp_path / "missing", "--json")
    line = assert_refused(result, "not a directory")
    document = json.loads(result.stdout)
    assert document == {"error": line.removeprefix("error: "), "exit_code": 2}
    assert_nothing_recorded(state)


# Profiles.


def write_profile(tmp_path: Path, document: dict | str) -> str:
    path = tmp_path / "profile.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


LAUNCHED = {"name": "t/agent", "version": "1", "engine": "builtin", "model": "synth/qwen3-tiny"}


@pytest.mark.parametrize(
    ("document", "fragments"),
    [
        ('{"name": "t/agent",', ("profile.json is not valid JSON", "line 1")),
        ("[1, 2]", ("must hold a JSON object, not list",)),
        ("\x00\x01binary", ("not valid JSON",)),
        ({**LAUNCHED, "engine": "gpt-cli"}, ("engine", "'builtin'", "gpt-cli")),
        ({**LAUNCHED, "args": "--fast"}, ("args", "valid list", "'--fast'")),
        ({**LAUNCHED, "setup": [1, 2]}, ("setup.0", "valid string")),
        ({**LAUNCHED, "colour": "red"}, ("colour", "Extra inputs are not permitted")),
        ({**LAUNCHED, "version": ""}, ("version",)),
    ],
    ids=[
        "invalid-json",
        "not-an-object",
        "binary",
        "unknown-engine",
        "args-not-a-list",
        "setup-not-strings",
        "unknown-field",
        "empty-version",
    ],
)
def test_malformed_profile_is_refused(state, tmp_path, document, fragments):
    assert_refused(synth("profile", "publish", write_profile(tmp_path, document)), *fragments)
    assert_nothing_recorded(state)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"env": [{"name": "ANTHROPIC_BASE_URL", "value": "http://elsewhere"}]}, "sets"),
        ({"env": [{"name": "ANTHROPIC_AUTH_TOKEN", "bind": "token"}]}, "sets"),
        ({"env": [{"name": "ANTHROPIC_API_KEY", "bind": "token"}]}, "sets"),
        ({"args": ["--model", "claude-opus"]}, "passes --model"),
        ({"engine": "claude-code", "env": [{"name": "ANTHROPIC_MODEL", "value": "x"}]}, "sets"),
    ],
    ids=["proxy-route", "token", "api-key", "model-flag", "model-alias"],
)
def test_profile_overriding_the_route_token_or_model_binding_is_refused(
    state, tmp_path, override, named
):
    path = write_profile(tmp_path, {**LAUNCHED, **override})
    assert_refused(synth("profile", "publish", path), named, "set by the launcher")
    assert_nothing_recorded(state)


def test_profile_refusal_with_json_prints_the_error_document(state, tmp_path):
    result = synth("profile", "publish", write_profile(tmp_path, "{"), "--json")
    line = assert_refused(result, "not valid JSON")
    assert json.loads(result.stdout) == {"error": line.removeprefix("error: "), "exit_code": 2}


# Plans (and profiles given inline to `run start`).


@pytest.fixture
def one_task_dataset(state, tmp_path) -> set[Path]:
    """A published one-task dataset; returns the object store's files after publishing."""
    task_dir(tmp_path / "one")
    published = synth(
        "dataset", "publish", str(tmp_path / "one"), "--name", "t/one", "--version", "v1"
    )
    assert published.exit_code == 0, published.stderr
    return stored_objects(state)


def start(plan: str, *extra: str, actor: str = "@profiles/oracle.json") -> Result:
    cwd = Path.cwd()
    os.chdir(PROJECT_ROOT)
    try:
        return synth(
            "run", "start", "--dataset", "t/one@v1", "--actor", actor, "--plan", plan, *extra
        )
    finally:
        os.chdir(cwd)


def assert_no_run(state: Path, objects_before: set[Path]) -> None:
    assert json.loads(synth("run", "list", "--json").stdout) == []
    assert stored_objects(state) == objects_before


@pytest.mark.parametrize(
    ("plan", "fragments"),
    [
        ('{"kind": "bake"}', ("'bake'", "'eval'", "'train'")),
        ('{"kind": "eval", "attempts_per_task": -3}', ("attempts_per_task", "-3")),
        ('{"kind": "eval", "tasks_per_batch": 0}', ("tasks_per_batch", "greater than")),
        ('{"kind": "eval", "attempts_per_task": "two"}', ("attempts_per_task", "'two'")),
        ('{"kind": "eval", "budget": {"cpus": -1}}', ("budget", "cpus")),
        ('{"kind": "eval",', ("the plan argument is not valid JSON", "column")),
        ("[]", ("must hold a JSON object, not list",)),
        ("@plans/missing.json", ("plans/missing.json does not exist",)),
    ],
    ids=[
        "unknown-kind",
        "negative-attempts",
        "zero-batch",
        "attempts-wrong-type",
        "negative-cpus",
        "inline-syntax-error",
        "not-an-object",
        "missing-file",
    ],
)
def test_malformed_plan_is_refused(state, one_task_dataset, plan, fragments):
    assert_refused(start(plan), *fragments)
    assert_no_run(state, one_task_dataset)


def test_inline_actor_profile_overriding_the_route_is_refused_at_run_start(state, one_task_dataset):
    actor = json.dumps(
        {**LAUNCHED, "env": [{"name": "ANTHROPIC_BASE_URL", "value": "http://elsewhere"}]}
    )
    assert_refused(start("@plans/eval.json", actor=actor), "actor profile", "ANTHROPIC_BASE_URL")
    assert_no_run(state, one_task_dataset)


def test_plan_refusal_with_json_prints_the_error_document(state, one_task_dataset):
    result = start('{"kind": "eval",', "--json")
    line = assert_refused(result, "not valid JSON")
    assert json.loads(result.stdout) == {"error": line.removeprefix("error: "), "exit_code": 2}
    assert_no_run(state, one_task_dataset)


def test_the_installed_command_refuses_with_a_json_error_and_no_traceback(state, tmp_path):
    """The real entry point, in its own process: what an operator's script sees."""
    profile = write_profile(tmp_path, {**LAUNCHED, "engine": "gpt-cli"})
    result = subprocess.run(
        [sys.executable, "-m", "synth_pipelines.cli", "profile", "publish", "--json", profile],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=120,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert json.loads(result.stdout)["error"].startswith("invalid profile: engine")
