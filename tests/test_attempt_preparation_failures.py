"""An attempt whose environment cannot be prepared fails alone, with its reason.

Harbor prepares a trial's environment while creating the trial; an exception there
used to escape `run_attempt` and fail the whole batch, so the remaining attempts never
ran. The task here passes publishing (Docker could build it) but the local sandbox
refuses it (`RUN`): its attempt is recorded as failed with the refusal, and the other
task of the batch is graded as usual.
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
    needs_build = dataset / "needs-an-image-build"
    shutil.copytree(SAMPLE_DATASET / "write-robots-txt", needs_build)
    toml = needs_build / "task.toml"
    toml.write_text(toml.read_text().replace("write-robots-txt", "needs-an-image-build"))
    dockerfile = needs_build / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN pip install requests\n")

    outcomes = {
        outcome.task_name: outcome
        for outcome in trial_outcomes(evaluate(dataset, profile_document("oracle.json")))
    }

    refused = outcomes["synth/needs-an-image-build"]
    assert refused.status == "failed"
    assert refused.exception_type == "UnsupportedTaskError"
    assert "RUN needs an image build" in refused.exception_message
    graded = outcomes["synth/update-version-file"]
    assert graded.status == "completed", graded.exception_message
    assert graded.rewards_json == '{"reward": 1.0}'
