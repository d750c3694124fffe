"""Training runs through the platform's runtime: the same jobs the batch gate launches."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg

from synth_pipelines.config import Settings
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest, batch_key
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import accept_run, get_run
from synth_pipelines.definitions import definitions
from synth_pipelines.registry.datasets import publish_dataset
from synth_pipelines.storage.objectstore import open_object_store
from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET
from tests.live_services import set_script

TASKS = ("update-version-file", "write-robots-txt")
RIGHT = {
    "update-version-file": "grep -m1 -oE '^## [0-9]+\\\\.[0-9]+\\\\.[0-9]+' CHANGELOG.md "
    "| cut -d' ' -f2 > VERSION",
    "write-robots-txt": "printf 'User-agent: *\\\\nDisallow: /admin/\\\\nDisallow: /cart/\\\\n"
    "Sitemap: https://shop.example.com/sitemap.xml\\\\n' > public/robots.txt",
}
WRONG = {
    "update-version-file": "echo 0.0.0 > VERSION",
    "write-robots-txt": "echo nope > public/robots.txt",
}
MARKER = {"update-version-file": "VERSION", "write-robots-txt": "robots.txt"}


def tool_call(command: str) -> str:
    return f'<tool_call>\n{{"name": "bash", "arguments": {{"command": "{command}"}}}}\n</tool_call>'


def script_one_right_one_wrong(model_url: str, batches: int = 1) -> None:
    """Per task and batch, the first attempt solves it and the second does not: every
    group has signal."""
    entries = [{"match": "<tool_response>", "completion": "Done.", "repeat": True}]
    for task in TASKS:
        first_turn = f"{MARKER[task]}(?!.*<tool_response>)"
        for _ in range(batches):
            entries.append({"match": first_turn, "completion": tool_call(RIGHT[task])})
            entries.append({"match": first_turn, "completion": tool_call(WRONG[task])})
    set_script(model_url, entries)


def script_every_attempt_right(model_url: str) -> None:
    """Every attempt of every task solves it, however often it is asked."""
    entries = [{"match": "<tool_response>", "completion": "Done.", "repeat": True}]
    for task in TASKS:
        first_turn = f"{MARKER[task]}(?!.*<tool_response>)"
        entries.append({"match": first_turn, "completion": tool_call(RIGHT[task]), "repeat": True})
    set_script(model_url, entries)


def training_dataset(tmp_path: Path) -> Path:
    directory = tmp_path / "train-dataset"
    for task in TASKS:
        shutil.copytree(SAMPLE_DATASET / task, directory / task)
    return directory


def accept_training(
    dataset_dir: Path, plan: dict, model: str | None = None, profile: dict | None = None
) -> RunRecord:
    """A training run of the built-in profile (or `profile`) on the published directory."""
    engine = control_engine(Settings())
    store = open_object_store(Settings().objects_url)
    dataset, _ = publish_dataset(engine, store, dataset_dir, "test/train", "v1", "tester")
    if profile is None:
        profile = json.loads((PROJECT_ROOT / "profiles" / "builtin.json").read_text())
    request = RunRequest(
        owner=Settings().owner,
        dataset=DatasetPin(
            name=dataset.name,
            version=dataset.version,
            digest=dataset.digest,
            task_count=dataset.task_count,
        ),
        actor=PinnedProfile.from_document(profile),
        plan={"kind": "train", **plan},
        model=model,
    )
    return accept_run(engine, request, org="local")[0]


def run_batch(run: RunRecord, index: int, job: str = "training_batch") -> dg.ExecuteInProcessResult:
    instance = dg.DagsterInstance.get()
    key = batch_key(run.run_id, index)
    if not instance.has_dynamic_partition("batches", key):
        instance.add_dynamic_partitions("batches", [key])
    return (
        definitions(Settings())
        .resolve_job_def(job)
        .execute_in_process(partition_key=key, instance=instance, raise_on_error=False)
    )


def refreshed(run: RunRecord) -> RunRecord:
    return get_run(control_engine(Settings()), run.run_id)
