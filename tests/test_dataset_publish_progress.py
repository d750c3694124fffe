"""`synth dataset publish` tells its progress per task, packed then uploaded, on stderr:
with `--json` one documented JSON line per task and phase, stdout keeping the document."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.contracts.documents import validated
from synth_pipelines.storage.objectstore import open_object_store
from tests.conftest import SAMPLE_DATASET

pytestmark = pytest.mark.usefixtures("cli_gateway")

TASKS = ("fix-off-by-one-pagination", "implement-slugify", "write-robots-txt")


def _three_tasks(tmp_path: Path) -> Path:
    for task in TASKS:
        shutil.copytree(SAMPLE_DATASET / task, tmp_path / "dataset" / task)
    return tmp_path / "dataset"


def _publish(directory: Path, *options: str):
    arguments = ["dataset", "publish", str(directory), "--name", "test/three", "--version", "v1"]
    result = CliRunner().invoke(app, [*arguments, *options])
    assert result.exit_code == 0, result.output
    return result


def test_json_progress_is_each_task_packed_then_uploaded_on_stderr(state, tmp_path):
    result = _publish(_three_tasks(tmp_path), "--json")
    document = json.loads(result.stdout)
    assert document == validated("dataset publish", document) and document["created"]
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert all(line == validated("dataset publish progress", line) for line in lines)
    packed = [line for line in lines if line["phase"] == "packed"]
    uploaded = [line for line in lines if line["phase"] == "uploaded"]
    assert lines == packed + uploaded
    for phase in (packed, uploaded):
        assert [(line["done"], line["total"]) for line in phase] == [(1, 3), (2, 3), (3, 3)]
        assert {line["dataset"] for line in phase} == {"test/three@v1"}
    # Uploaded under the dataset's task names, each once.
    names = [line["task"] for line in uploaded]
    assert sorted(names) == sorted(task["name"] for task in _tasks_of("test/three@v1"))
    store = open_object_store(Settings().objects_url)
    assert all(store.head(task["package_key"]) for task in _tasks_of("test/three@v1"))


def test_publishing_identical_content_again_packs_and_uploads_nothing_new(state, tmp_path):
    directory = _three_tasks(tmp_path)
    _publish(directory, "--json")
    again = _publish(directory, "--json")
    assert json.loads(again.stdout)["created"] is False
    phases = [json.loads(line)["phase"] for line in again.stderr.splitlines()]
    assert phases == ["packed"] * 3


def test_without_json_stdout_says_what_was_published(state, tmp_path):
    result = _publish(_three_tasks(tmp_path))
    assert result.stdout.startswith("published test/three@v1: 3 tasks")
    assert "{" not in result.stderr


def _tasks_of(ref: str) -> list[dict]:
    result = CliRunner().invoke(app, ["dataset", "show", ref, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["tasks"]
