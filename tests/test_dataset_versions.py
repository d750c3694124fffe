import shutil
from pathlib import Path

import pytest
from harbor.publisher.packager import Packager

from synth_pipelines.config import Settings
from synth_pipelines.contracts.dataset import TaskRef
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.table_outputs import load_table
from synth_pipelines.registry.datasets import (
    DatasetError,
    DatasetNotFoundError,
    get_dataset,
    list_datasets,
    publish_dataset,
    read_page,
)
from synth_pipelines.registry.task_packages import materialize_task
from synth_pipelines.storage.objectstore import open_object_store
from tests.conftest import SAMPLE_DATASET


def _publish(directory: Path, version: str = "v1"):
    store = open_object_store(Settings().objects_url)
    return publish_dataset(
        control_engine(Settings()), store, directory, "synth/sample", version, "tester"
    )


def test_task_digests_equal_harbors_packager_hash(state):
    dataset, created = _publish(SAMPLE_DATASET)
    assert created
    tasks = read_page(control_engine(Settings()), dataset, 0, dataset.task_count)
    task_dirs = sorted(p for p in SAMPLE_DATASET.iterdir() if (p / "task.toml").is_file())
    assert len(tasks) == len(task_dirs) >= 12
    for task, task_dir in zip(tasks, task_dirs, strict=True):
        harbor_hash, _ = Packager.compute_content_hash(task_dir)
        assert task.digest == f"sha256:{harbor_hash}"


def test_republishing_identical_content_is_a_no_op(state):
    first, created = _publish(SAMPLE_DATASET)
    second, created_again = _publish(SAMPLE_DATASET)
    assert created and not created_again
    assert first == second
    assert len(list_datasets(control_engine(Settings()))) == 1


def test_changed_content_under_an_existing_version_is_refused(state, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(SAMPLE_DATASET, copy)
    _publish(copy)
    instruction = next(copy.glob("*/instruction.md"))
    instruction.write_text(instruction.read_text() + "\nOne more sentence.\n")
    with pytest.raises(DatasetError, match="already exists with different content"):
        _publish(copy)
    assert get_dataset(control_engine(Settings()), "synth/sample@v1").task_count == len(
        list(copy.glob("*/task.toml"))
    )


def test_pages_read_the_ordered_task_list(state):
    dataset, _ = _publish(SAMPLE_DATASET)
    engine = control_engine(Settings())
    everything = read_page(engine, dataset, 0, dataset.task_count)
    paged: list[TaskRef] = []
    for offset in range(0, dataset.task_count, 5):
        paged.extend(read_page(engine, dataset, offset, 5))
    assert paged == everything
    assert [t.position for t in everything] == list(range(dataset.task_count))
    assert read_page(engine, dataset, dataset.task_count, 5) == []


def test_published_manifest_table_matches_the_task_list(state):
    dataset, _ = _publish(SAMPLE_DATASET)
    store = open_object_store(Settings().objects_url)
    table = load_table(control_engine(Settings()), store, "dataset_tasks", dataset.ref)
    assert TaskRef.from_table(table) == read_page(
        control_engine(Settings()), dataset, 0, dataset.task_count
    )


def test_materialized_task_package_reproduces_the_pinned_digest(state, tmp_path):
    dataset, _ = _publish(SAMPLE_DATASET)
    store = open_object_store(Settings().objects_url)
    task = read_page(control_engine(Settings()), dataset, 3, 1)[0]
    task_dir = materialize_task(store, task, tmp_path / "cache")
    harbor_hash, _ = Packager.compute_content_hash(task_dir)
    assert f"sha256:{harbor_hash}" == task.digest
    assert materialize_task(store, task, tmp_path / "cache") == task_dir


def test_malformed_task_toml_is_refused_and_nothing_is_written(state, tmp_path):
    copy = tmp_path / "broken"
    shutil.copytree(SAMPLE_DATASET, copy)
    bad = next(copy.glob("*/task.toml"))
    bad.write_text(bad.read_text().replace("[verifier]", "[verifier\n"))
    with pytest.raises(DatasetError, match=r"task\.toml: not valid TOML"):
        _publish(copy)
    assert list_datasets(control_engine(Settings())) == []
    assert not (state / "objects").exists() or not any((state / "objects").rglob("*.tar.gz"))


def test_unknown_dataset_reference_names_the_problem(state):
    with pytest.raises(DatasetNotFoundError, match="unknown dataset 'synth/none@v9'"):
        get_dataset(control_engine(Settings()), "synth/none@v9")
    with pytest.raises(DatasetError, match="needs a version"):
        get_dataset(control_engine(Settings()), "synth/sample")
