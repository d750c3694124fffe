"""What a judge is asked: the task the actor was given, where its work is, how to answer."""

from __future__ import annotations

VERDICT_PATH = "/logs/verifier/reward.json"
RATIONALE_PATH = "/logs/verifier/rationale.md"
CONTEXT_DIR = "/tests"


def judge_instruction(task_instruction: str, workdir: str, declared_outputs: list[str]) -> str:
    outputs = ", ".join(declared_outputs) if declared_outputs else "(none declared)"
    return (
        "You are assessing another agent's work on a task. Do not redo the task.\n\n"
        f"The task it was given:\n\n{task_instruction.strip()}\n\n"
        f"Its work is in {workdir}; the outputs it was asked to produce are: {outputs}. "
        f"Reference material for the assessment is in {CONTEXT_DIR}.\n\n"
        f'Write your verdict to {VERDICT_PATH} as {{"reward": 1}} if the work fully meets '
        'the task, or {"reward": 0} otherwise, and a short rationale to '
        f"{RATIONALE_PATH}."
    )
