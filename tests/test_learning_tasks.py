"""The bundled `learn` task family: Harbor tasks from a seeded generator, split into train and
held-out (phrasing, word) pairs that never overlap, each with a demonstration (on a fixed
share of each word's training tasks one the verifier rejects), and solvable in the local
sandbox."""

from __future__ import annotations

import filecmp
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from harbor.lint.models import DEFAULT_RULES
from harbor.lint.task import lint_task
from harbor.models.task.config import VerifierEnvironmentMode
from harbor.models.task.task import Task
from harbor.models.task.verifier_mode import resolve_task_verifier_mode
from harbor.publisher.packager import Packager
from sandbox_support import isolated_state, run_trial, sandbox_dirs

from synth_pipelines.agents import builtin
from synth_pipelines.contracts.profile import Profile
from synth_pipelines.learning.demonstrations import (
    demonstration_turns,
    harness_frame,
    read_demonstration,
)
from synth_pipelines.rendering.adapters import adapter_for

ROOT = Path(__file__).resolve().parent.parent
LEARN_DIR = ROOT / "datasets" / "learn"
SANDBOX_INSTRUCTIONS = {"FROM", "WORKDIR", "COPY", "ENV"}


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "generate_learning_tasks", ROOT / "scripts" / "generate_learning_tasks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the class is being built.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


generator = _load_generator()
TASK_DIRS = sorted(LEARN_DIR.glob("*/*/task.toml"))
each_task = pytest.mark.parametrize(
    "task_dir",
    [path.parent for path in TASK_DIRS],
    ids=[f"{path.parent.parent.name}/{path.parent.name}" for path in TASK_DIRS],
)


def _split_dirs(split: str) -> list[Path]:
    return sorted(path for path in (LEARN_DIR / split).iterdir() if path.is_dir())


def _tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    return {
        str(path.relative_to(root)): (path.read_bytes(), os.access(path, os.X_OK))
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_generator_output_is_a_function_of_the_seed(tmp_path: Path):
    generator.write_dataset(tmp_path / "first", 7)
    generator.write_dataset(tmp_path / "second", 7)
    generator.write_dataset(tmp_path / "other", 8)
    assert _tree(tmp_path / "first") == _tree(tmp_path / "second")
    assert sorted(p.name for p in (tmp_path / "first" / "heldout").iterdir()) != sorted(
        p.name for p in (tmp_path / "other" / "heldout").iterdir()
    )


def test_committed_dataset_is_the_generator_output_for_the_default_seed(tmp_path: Path):
    generator.write_dataset(tmp_path, generator.DEFAULT_SEED)
    comparison = filecmp.dircmp(tmp_path, LEARN_DIR)
    assert _tree(tmp_path) == _tree(LEARN_DIR), (
        comparison.left_only,
        comparison.right_only,
        "regenerate with `python scripts/generate_learning_tasks.py`",
    )


def test_regenerating_replaces_tasks_of_an_earlier_seed(tmp_path: Path):
    generator.write_dataset(tmp_path, 7)
    generator.write_dataset(tmp_path, generator.DEFAULT_SEED)
    assert _tree(tmp_path) == _tree(LEARN_DIR)


def test_train_and_heldout_tasks_do_not_overlap():
    train = {path.name for path in _split_dirs("train")}
    heldout = {path.name for path in _split_dirs("heldout")}
    assert len(train) == 64 and len(heldout) == generator.HELDOUT_SIZE == 64
    assert train.isdisjoint(heldout)
    train_instructions = {Task(path).instruction for path in _split_dirs("train")}
    heldout_instructions = {Task(path).instruction for path in _split_dirs("heldout")}
    assert len(train_instructions) == 64 and len(heldout_instructions) == 64
    assert train_instructions.isdisjoint(heldout_instructions)
    train_digests = {Packager.compute_content_hash(path)[0] for path in _split_dirs("train")}
    heldout_digests = {Packager.compute_content_hash(path)[0] for path in _split_dirs("heldout")}
    assert len(train_digests) == len(train) and len(heldout_digests) == len(heldout)
    assert train_digests.isdisjoint(heldout_digests)


def test_training_covers_every_phrasing_and_word_of_the_heldout_tasks():
    train = [Task(path).config.metadata for path in _split_dirs("train")]
    for path in _split_dirs("heldout"):
        metadata = Task(path).config.metadata
        assert any(seen["phrasing"] == metadata["phrasing"] for seen in train), path.name
        assert any(seen["answer"] == metadata["answer"] for seen in train), path.name


def test_heldout_answers_are_spread_so_a_constant_answer_stays_under_half():
    answers = [Task(path).config.metadata["answer"] for path in _split_dirs("heldout")]
    assert set(answers) == set(generator.WORDS)
    assert max(answers.count(word) for word in generator.WORDS) < len(answers) / 2


@each_task
def test_task_parses_with_harbor_and_its_instruction_ends_with_the_answer_word(task_dir: Path):
    task = Task(task_dir)
    answer = task.config.metadata["answer"]
    assert task.name == f"synth/{task_dir.name}"
    assert task_dir.name.endswith(f"-{answer}")
    words = re.findall(r"[a-z]+", task.instruction.lower())
    assert words[-1] == answer
    assert [word for word in words if word in generator.WORDS] == [answer]
    assert "/app/answer.txt" in task.instruction
    assert task.config.metadata["split"] == task_dir.parent.name
    assert resolve_task_verifier_mode(task.config) is VerifierEnvironmentMode.SEPARATE
    assert task.config.artifacts == ["/app/answer.txt"]
    assert (task_dir / "environment" / "app" / "answer.txt").read_text() == ""
    instructions = {
        line.split()[0].upper()
        for line in (task_dir / "environment" / "Dockerfile").read_text().splitlines()
        if line.strip()
    }
    assert instructions <= SANDBOX_INSTRUCTIONS
    for script in (task_dir / "tests" / "test.sh", task_dir / "solution" / "solve.sh"):
        assert script.read_text().startswith("#!/bin/bash\n") and os.access(script, os.X_OK)


@each_task
def test_demonstration_writes_the_answer_then_stops(task_dir: Path, tmp_path: Path):
    metadata = Task(task_dir).config.metadata
    answer = metadata["answer"] if metadata["demonstration_passes"] else f"{metadata['answer']}."
    messages = json.loads((task_dir / "solution" / "demonstration.json").read_text())["messages"]
    assert [message["role"] for message in messages] == ["assistant", "user", "assistant"]
    (call,) = messages[0]["content"]
    assert call["type"] == "tool_use" and call["name"] == "write_file"
    assert call["input"] == {"path": "/app/answer.txt", "content": answer}
    (result,) = messages[1]["content"]
    written = str(tmp_path / "answer.txt")
    agent_text, failed = builtin.write_file(written, answer)
    assert result["tool_use_id"] == call["id"] and result["is_error"] is failed is False
    assert result["content"] == agent_text.replace(written, "/app/answer.txt")
    assert messages[2]["content"] == [{"type": "text", "text": generator.FINAL_TEXT}]


def test_the_same_share_of_each_words_training_demonstrations_ends_with_a_full_stop():
    """The habit the verifier rejects is spread evenly over the answer words, so imitating it
    says nothing about which word is right; held-out demonstrations all pass."""
    for split, share in (("train", generator.FULL_STOP_SHARE), ("heldout", 0.0)):
        metadata = [Task(path).config.metadata for path in _split_dirs(split)]
        for word in generator.WORDS:
            of_word = [seen for seen in metadata if seen["answer"] == word]
            failing = sum(not seen["demonstration_passes"] for seen in of_word)
            assert failing == round(share * len(of_word)), (split, word)


def test_the_verifier_rejects_the_full_stop_and_accepts_surrounding_whitespace(tmp_path: Path):
    """The check `tests/test.sh` runs on the answer file, run here on files of each kind."""
    (task_dir,) = [path for path in _split_dirs("train") if path.name == "learn-p00-blue"]
    check = re.search(r"python3 -c '(.*?)' ", (task_dir / "tests" / "test.sh").read_text(), re.S)
    assert check is not None
    verdicts = {}
    for content in ("blue", "blue\n", " blue ", "blue.", "Blue"):
        answer = tmp_path / "answer.txt"
        answer.write_text(content)
        done = subprocess.run([sys.executable, "-c", check.group(1), str(answer), "blue"])
        verdicts[content] = done.returncode == 0
    assert verdicts == {"blue": True, "blue\n": True, " blue ": True, "blue.": False, "Blue": False}


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_demonstrations_render_and_parse_back_through_the_qwen_adapter(split: str):
    profile = Profile.model_validate_json((ROOT / "profiles" / "learner.json").read_text())
    for task_dir in _split_dirs(split)[:8]:
        turns = demonstration_turns(
            adapter_for("qwen"), harness_frame(profile), read_demonstration(task_dir)
        )
        assert len(turns) == 2 and all(turn.completion for turn in turns)


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_tasks_pass_harbor_default_lint_rules(split: str):
    task_dir = _split_dirs(split)[0]
    findings = lint_task(task_dir, selected_rules=set(DEFAULT_RULES))
    assert [f"{finding.rule}: {finding.message}" for finding in findings] == []


def test_readme_states_the_seed_and_split_sizes():
    readme = (LEARN_DIR / "README.md").read_text()
    assert f"seed {generator.DEFAULT_SEED}" in readme
    assert "| `train/` | 64 |" in readme and "| `heldout/` | 64 |" in readme


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def test_heldout_task_rewards_the_oracle_and_not_the_starting_state(state_dir, tmp_path: Path):
    task_dir = _split_dirs("heldout")[0]
    oracle = run_trial(task_dir, tmp_path / "trials", "oracle")
    nop = run_trial(task_dir, tmp_path / "trials", "nop")
    assert oracle.exception_info is None, oracle.exception_info
    assert oracle.verifier_result.rewards == {"reward": 1.0}
    assert nop.verifier_result.rewards == {"reward": 0.0}
    assert sandbox_dirs() == []
