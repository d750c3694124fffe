"""`synth image build|list|prune`: tasks' images built into the cache with progress,
the cache listed with sizes, pruned to a bound; bad input is one line, exit 2."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys

import jsonschema
import pytest
from sandbox_support import make_task, requires_cgroups

from synth_pipelines.config import Settings
from synth_pipelines.contracts.documents import schema
from synth_pipelines.sandbox.bases import KNOWN_BASES, BaseImages
from synth_pipelines.sandbox.layers import LayerStore
from tests.conftest import PROJECT_ROOT

pytestmark = requires_cgroups
BASE = "python:3.11-slim"


@pytest.fixture
def images_dir(tmp_path):
    """An image cache of its own (prune must not touch the suite's), holding only the
    base's tarball from the suite's cache (made there first if it is not)."""
    shared = Settings().images_dir
    base = KNOWN_BASES[BASE]
    tarball = asyncio.run(BaseImages(shared, LayerStore(shared / "layers")).tarball(base))
    own = tmp_path / "images"
    (own / "bases").mkdir(parents=True)
    try:
        os.link(tarball, own / "bases" / tarball.name)
    except OSError:
        shutil.copy2(tarball, own / "bases" / tarball.name)
    return own


def synth(images_dir, *args: str, code: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "synth_pipelines.cli", "image", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "SYNTH_IMAGE_CACHE_DIR": str(images_dir)},
        timeout=600,
    )
    assert done.returncode == code, done.stderr
    return done


def document(command: str, done: subprocess.CompletedProcess):
    found = json.loads(done.stdout)
    jsonschema.validate(found, schema(command))
    return found


def test_build_lists_and_prunes_the_cache(tmp_path, images_dir):
    task = make_task(
        tmp_path, "two-steps", dockerfile=f"FROM {BASE}\nRUN echo a > /a\nWORKDIR /w\n"
    )

    first = synth(images_dir, "build", str(task), "--json")
    (built,) = document("image build", first)
    assert (built["task"], built["base"], built["layers"]) == ("two-steps", BASE, 3)
    assert (built["built"], built["cached"]) == (2, 0)
    assert "two-steps: step 1/2 `RUN echo a > /a`: building" in first.stderr

    (again,) = document("image build", synth(images_dir, "build", str(task), "--json"))
    assert (again["built"], again["cached"], again["image"]) == (0, 2, built["image"])

    listed = document("image list", synth(images_dir, "list", "--json"))
    assert [base["names"] for base in listed["bases"]] == [
        ["python:3.11-slim", "python:3.11-slim-bookworm"]
    ]
    assert {layer["description"] for layer in listed["layers"]} == {
        f"FROM {BASE}",
        "RUN echo a > /a",
        "WORKDIR /w",
    }
    assert not any(layer["in_use"] for layer in listed["layers"])
    assert listed["layer_bytes"] == sum(layer["size_bytes"] for layer in listed["layers"])

    pruned = document("image prune", synth(images_dir, "prune", "--keep-mb", "0", "--json"))
    assert len(pruned["removed"]) == 3 and pruned["layer_bytes"] == 0
    assert pruned["freed_bytes"] == listed["layer_bytes"]
    assert document("image list", synth(images_dir, "list", "--json"))["layers"] == []


@pytest.mark.parametrize(
    ("dockerfile", "message"),
    [
        ("FROM ubuntu:24.04\nRUN true\n", "FROM ubuntu:24.04 cannot be built here"),
        (f"FROM {BASE}\nWORKDIR /w\n", "has no RUN or USER step"),
    ],
)
def test_a_task_that_cannot_be_built_is_one_line_and_exit_2(
    tmp_path, images_dir, dockerfile, message
):
    task = make_task(tmp_path, "refused", dockerfile=dockerfile)
    done = synth(images_dir, "build", str(task), code=2)
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (images_dir / "layers").exists()


def test_a_path_without_tasks_is_one_line_and_exit_2(tmp_path, images_dir):
    done = synth(images_dir, "build", str(tmp_path / "missing"), "--json", code=2)
    assert json.loads(done.stdout)["error"].endswith("is not a directory")
    assert len(done.stderr.strip().splitlines()) == 1
