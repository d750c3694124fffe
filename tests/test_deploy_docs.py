"""Each configuration block `docs/deploy.md` marks as checked is valid for the installed code."""

import importlib
import json
import re

import kubernetes
import pytest
import yaml
from dagster._config import process_config
from dagster._core.instance.config import dagster_instance_config_schema
from dagster_k8s.models import k8s_model_from_dict
from pydantic import TypeAdapter

from synth_pipelines.config import Settings
from synth_pipelines.contracts.plan import Plan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.definitions import defs
from synth_pipelines.runtime.harbor_trials import Actor, environment_config
from tests.conftest import PROJECT_ROOT

CHECKED_BLOCK = re.compile(r"<!-- checked: (?P<kind>[\w-]+) -->\n```\w+\n(?P<body>.*?)```", re.S)


def _blocks(kind: str) -> list[str]:
    text = (PROJECT_ROOT / "docs" / "deploy.md").read_text()
    found = [m["body"] for m in CHECKED_BLOCK.finditer(text) if m["kind"] == kind]
    assert found, f"docs/deploy.md has no checked {kind} block"
    return found


def _assert_valid(config_type, value) -> None:
    result = process_config(config_type, value)
    assert result.success, [error.message for error in result.errors]


def test_documented_kubernetes_instance_is_valid(monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "checked")
    (block,) = _blocks("dagster-instance")
    instance = yaml.safe_load(block)
    _assert_valid(dagster_instance_config_schema(), instance)
    for section in ("run_coordinator", "run_launcher", "compute_logs"):
        plugin = instance[section]
        module = importlib.import_module(plugin["module"].replace("dagster.core", "dagster._core"))
        _assert_valid(getattr(module, plugin["class"]).config_type(), plugin.get("config", {}))
    assert instance["run_launcher"]["class"] == "K8sRunLauncher"


def test_documented_run_pod_resources_are_a_kubernetes_container_config():
    (block,) = _blocks("k8s-run-tag")
    container = json.loads(block)["container_config"]
    model = k8s_model_from_dict(kubernetes.client.V1Container, {"name": "run", **container})
    assert model.resources.limits == {"cpu": "4", "memory": "16Gi"}


@pytest.mark.parametrize("block", _blocks("plan"))
def test_documented_cloud_plans_select_harbor_providers(block):
    plan = TypeAdapter(Plan).validate_python(json.loads(block))
    oracle = json.loads((PROJECT_ROOT / "profiles" / "oracle.json").read_text())
    actor = Actor.of(PinnedProfile.from_document(oracle), None)
    assert plan.environment.provider in ("daytona", "modal", "e2b")
    assert environment_config(plan, Settings(), actor).type.value == plan.environment.provider


def test_documented_launchpad_config_is_valid_for_launch_experiment():
    (block,) = _blocks("launch-config")
    job = defs.resolve_job_def("launch_experiment")
    _assert_valid(job.run_config_schema.run_config_schema_type, yaml.safe_load(block))
