"""The bundled sample dataset: every task is a Harbor task that runs in the local sandbox and
can be regraded from its declared artifacts."""

import os
import re
from pathlib import Path, PurePosixPath

import pytest
from harbor.lint.models import DEFAULT_RULES
from harbor.lint.task import lint_task
from harbor.models.task.config import VerifierEnvironmentMode
from harbor.models.task.task import Task
from harbor.models.task.verifier_mode import (
    resolve_task_verifier_mode,
    resolve_verifier_environment_definition,
)
from harbor.publisher.packager import Packager

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "datasets" / "sample"
TASK_DIRS = sorted(path for path in SAMPLE_DIR.iterdir() if path.is_dir())
# The local sandbox emulates only these Dockerfile instructions; anything else is refused there.
SANDBOX_INSTRUCTIONS = {"FROM", "WORKDIR", "COPY", "ENV"}

each_task = pytest.mark.parametrize("task_dir", TASK_DIRS, ids=[path.name for path in TASK_DIRS])


def dockerfile_instructions(task_dir: Path) -> list[list[str]]:
    lines = (task_dir / "environment" / "Dockerfile").read_text().splitlines()
    return [line.split() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_sample_dataset_has_at_least_twelve_tasks():
    assert len(TASK_DIRS) >= 12


@each_task
def test_task_parses_with_harbor_under_the_synth_org(task_dir: Path):
    task = Task(task_dir)
    assert task.name == f"synth/{task_dir.name}"
    assert task.instruction.strip()


@each_task
def test_task_has_instruction_tests_and_solution_scripts(task_dir: Path):
    assert (task_dir / "instruction.md").is_file()
    for script in (task_dir / "tests" / "test.sh", task_dir / "solution" / "solve.sh"):
        assert script.read_text().startswith("#!/bin/bash\n"), script
        assert os.access(script, os.X_OK), f"{script} is not executable"


@each_task
def test_test_script_writes_the_reward_file(task_dir: Path):
    assert "/logs/verifier/reward.txt" in (task_dir / "tests" / "test.sh").read_text()


@each_task
def test_verifier_runs_separately_on_a_fresh_copy_of_the_environment(task_dir: Path):
    task = Task(task_dir)
    assert resolve_task_verifier_mode(task.config) is VerifierEnvironmentMode.SEPARATE
    definition = resolve_verifier_environment_definition(task.config, task.paths)
    assert definition is not None
    assert definition.directory == task.paths.environment_dir
    assert not definition.bundled_tests


@each_task
def test_artifacts_are_declared_and_exist_in_the_starting_state(task_dir: Path):
    # A declared artifact missing after the agent runs is recorded as a failed collection,
    # which makes the attempt impossible to regrade; starting files never go missing.
    artifacts = Task(task_dir).config.artifacts
    assert artifacts, "the verifier's inputs must be declared as artifacts"
    for artifact in artifacts:
        source = PurePosixPath(artifact if isinstance(artifact, str) else artifact.source)
        assert source.is_relative_to("/app"), source
        starting_path = task_dir / "environment" / "app" / source.relative_to("/app")
        assert starting_path.exists(), f"{source} is not in the starting state"


@each_task
def test_instruction_names_every_artifact_path(task_dir: Path):
    instruction = (task_dir / "instruction.md").read_text()
    for artifact in Task(task_dir).config.artifacts:
        source = artifact if isinstance(artifact, str) else artifact.source
        assert source in instruction, f"instruction.md never mentions {source}"


@each_task
def test_task_passes_harbor_default_lint_rules(task_dir: Path):
    findings = lint_task(task_dir, selected_rules=set(DEFAULT_RULES))
    assert [f"{finding.rule}: {finding.message}" for finding in findings] == []


@each_task
def test_task_content_digest_is_computable(task_dir: Path):
    digest, files = Packager.compute_content_hash(task_dir)
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert task_dir / "task.toml" in files


def test_task_content_digests_are_distinct():
    digests = {Packager.compute_content_hash(task_dir)[0] for task_dir in TASK_DIRS}
    assert len(digests) == len(TASK_DIRS)


@each_task
def test_dockerfile_uses_only_the_sandbox_subset(task_dir: Path):
    instructions = dockerfile_instructions(task_dir)
    assert instructions[0][0].upper() == "FROM"
    assert {words[0].upper() for words in instructions} <= SANDBOX_INSTRUCTIONS


@each_task
def test_dockerfile_copies_only_files_under_the_environment(task_dir: Path):
    environment_dir = (task_dir / "environment").resolve()
    copies = [words for words in dockerfile_instructions(task_dir) if words[0].upper() == "COPY"]
    assert copies
    for words in copies:
        for source in words[1:-1]:
            path = (environment_dir / source).resolve()
            assert path.is_relative_to(environment_dir) and path.exists(), source


def test_readme_lists_every_task():
    readme = (SAMPLE_DIR / "README.md").read_text()
    missing = [path.name for path in TASK_DIRS if f"`{path.name}`" not in readme]
    assert missing == []
