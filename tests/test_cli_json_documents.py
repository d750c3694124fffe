"""Every `--json` output validates against its documented schema (`synth schema`)."""

import json
import os
import subprocess
import sys

import jsonschema
import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.documents import DOCUMENTS
from synth_pipelines.credentials import load_signing_key
from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET
from tests.live_services import platform

pytestmark = pytest.mark.usefixtures("cli_gateway")


def synth(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "synth_pipelines.cli", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_json_outputs_validate_against_their_documented_schemas(state, monkeypatch):
    # A run is accepted only for a model the proxy and the model service serve.
    with platform(monkeypatch):
        _check_every_document()


def _check_every_document() -> None:
    schemas = json.loads(synth("schema").stdout)
    assert set(schemas) == set(DOCUMENTS)

    def check(command: str, *args: str) -> object:
        document = json.loads(synth(*args, "--json").stdout)
        jsonschema.validate(document, schemas[command])
        return document

    check(
        "dataset publish",
        "dataset",
        "publish",
        str(SAMPLE_DATASET),
        "--name",
        "synth/sample",
        "--version",
        "v1",
    )
    check("dataset show", "dataset", "show", "synth/sample@v1")
    check("dataset list", "dataset", "list")
    check("profile publish", "profile", "publish", "profiles/builtin.json")
    check("profile show", "profile", "show", "synth/builtin@1")
    check("profile list", "profile", "list")
    run = check(
        "run start",
        "run",
        "start",
        "--dataset",
        "synth/sample@v1",
        "--actor",
        "synth/builtin@1",
        "--plan",
        "@plans/eval.json",
        "--judge",
        "@profiles/judge.json",
    )
    check("run list", "run", "list")
    check("run show", "run", "show", run["run_id"])
    check("run show --assessments", "run", "show", run["run_id"], "--assessments")
    check("run checkpoints", "run", "checkpoints", run["run_id"])
    check("run workers", "run", "workers", run["run_id"])
    check("run compare", "run", "compare", run["run_id"], run["run_id"])
    check("train resolve --inspect", "train", "resolve", run["run_id"], "--inspect")
    check("run cancel", "run", "cancel", run["run_id"])
    trained = check(
        "train start",
        "train",
        "start",
        "--dataset",
        "synth/sample@v1",
        "--actor",
        "@profiles/builtin.json",
        "--plan",
        "@plans/train.json",
    )
    assert trained["kind"] == "train" and trained["batches"] == 3
    load_signing_key(Settings().signing_key_path)
    check("proxy token", "proxy", "token", "--run", "r", "--attempt", "a", "--model", "m")
    for line in synth("run", "events", run["run_id"], "--json").stdout.splitlines():
        jsonschema.validate(json.loads(line), schemas["run events"])


def test_a_train_command_refuses_a_plan_of_another_kind(state):
    synth("dataset", "publish", str(SAMPLE_DATASET), "--name", "synth/sample", "--version", "v1")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "synth_pipelines.cli",
            "train",
            "start",
            "--dataset",
            "synth/sample@v1",
            "--actor",
            "@profiles/builtin.json",
            "--plan",
            "@plans/eval.json",
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=120,
    )
    assert done.returncode == 2
    assert "is a 'eval' plan; this command takes 'train' or 'warm_start' plans" in done.stderr
