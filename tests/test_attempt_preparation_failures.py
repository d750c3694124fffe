"""An attempt whose environment cannot be prepared fails alone, with its reason.

Harbor prepares a trial's environment while creating the trial; an exception there
used to escape `run_attempt` and fail the whole batch, so the remaining attempts never
ran. The task here passes publishing but its image cannot be built (a `RUN` step
fails): its attempt is recorded as failed with the build's error, and the other task
of the batch is graded as usual.
"""

from __future__ import annotations

import shutil

import pytest

from tests.agent_runs import evaluate, profile_document, trial_outcomes
from tests.conftest import SAMPLE_DATASET

pytestmark = pytest.mark.slow


def test_an_attempt_whose_environment_cannot_be_prepared_fails_alone(state, tmp_path):
    dataset = tmp_path / "dataset"
    shutil.copytree(SAMPLE_DATASET / "update-version-file", dataset / "update-version-file")
    broken = dataset / "image-build-fails"
    shutil.copytree(SAMPLE_DATASET / "write-robots-txt", broken)
    toml = broken / "task.toml"
    toml.write_text(toml.read_text().replace("write-robots-txt", "image-build-fails"))
    dockerfile = broken / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo no such package >&2 && exit 3\n")

    outcomes = {
        outcome.task_name: outcome
        for outcome in trial_outcomes(evaluate(dataset, profile_document("oracle.json")))
    }

    refused = outcomes["synth/image-build-fails"]
    assert refused.status == "failed"
    assert refused.exception_type == "ImageBuildError"
    assert "(exit 3)" in refused.exception_message
    assert "no such package" in refused.exception_message
    graded = outcomes["synth/update-version-file"]
    assert graded.status == "completed", graded.exception_message
    assert graded.rewards_json == '{"reward": 1.0}'
