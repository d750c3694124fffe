"""A training run whose batches are recorded in the control database the way the batch
jobs record them (lifecycle events, `attempt.finished`, policy updates), without sampling:
for tests of what the CLI reads back."""

from __future__ import annotations

import json
from pathlib import Path

from synth_pipelines.config import Settings
from synth_pipelines.contracts.batch_learning import BatchLearning
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import RunSpec, batch_key
from synth_pipelines.contracts.worker_attempt import WorkerAdvertisement
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.policy_updates import acknowledge, mark_unresolved
from synth_pipelines.control.worker_attempts import claim_batch
from synth_pipelines.control.worker_claim import WorkerClaim
from tests.training_runs import accept_training, training_dataset

PLAN = {"groups_per_batch": 2, "attempts_per_group": 2, "batches": 3, "max_tokens": 64}
# A checkpoint id longer than a table column of an 80-column terminal.
SAMPLERS = (
    "synth/qwen3-tiny",
    "tinker://r-0123456789abcdef:train:0/sampler_weights/r-0123456789abcdef.b0000",
)
REWARDS = ((1.0, 0.0, 0.0, 0.0), (1.0, 1.0, 1.0, 0.0), (0.5, 1.0, 1.0, 1.0))


def learning_metrics(index: int) -> dict:
    rewards = REWARDS[index]
    return {
        "sampler": SAMPLERS[index],
        "attempts": len(rewards),
        "assessed": len(rewards),
        "reward_mean": sum(rewards) / len(rewards),
        "groups": 2,
        "groups_used": 2 - index,
        "groups_dropped": {"all_good": 1} if index else {},
        "action_tokens_per_turn": 12.5,
        "turns_per_attempt": 2.0,
        "optimizer_step": index == 0,
        "no_step_reason": None if index == 0 else "no datums",
        "learning_rate": 1e-4,
        "kl_sample_train_v1": 3.5e-5 * (index + 1),
    }


WORKER = WorkerAdvertisement(
    worker="test worker",
    engines=("oracle", "nop", "claude-code", "builtin"),
    providers=("local",),
    judges=True,
)


def started_batch(spec: RunSpec, index: int, attempts: int, lease_sec: float = 60) -> WorkerClaim:
    """Batch `index` claimed by a worker of the test's own, and started under the claim."""
    engine = control_engine(Settings())
    claim = WorkerClaim(
        engine, claim_batch(engine, spec, index, WORKER, lease_sec=lease_sec), lease_sec
    )
    claim.append(
        "batch.started",
        {"batch": batch_key(spec.run_id, index), "index": index, "attempts": attempts},
    )
    return claim


def record_attempts(claim: WorkerClaim, run: RunRecord, index: int) -> None:
    for number, reward in enumerate(REWARDS[index]):
        claim.append(
            "attempt.finished",
            {
                "batch": batch_key(run.run_id, index),
                "attempt_id": f"a{index}-{number}",
                "task": "t",
                "status": "completed",
                "rewards": json.dumps({"reward": reward}),
            },
        )


def record_batch(run: RunRecord, index: int, *, learned: bool = True) -> None:
    """Batch `index` sampled, and with `learned` its update acknowledged and the batch
    completed."""
    engine = control_engine(Settings())
    claim = started_batch(run.spec, index, len(REWARDS[index]))
    record_attempts(claim, run, index)
    if not learned:
        return
    key = batch_key(run.run_id, index)
    mark_unresolved(engine, run.run_id, key, index, datums=6 - 2 * index)
    acknowledge(
        engine,
        run.run_id,
        key,
        f"tinker://{run.run_id}/state/{index}",
        BatchLearning(**learning_metrics(index)),
    )
    claim.complete(run.spec, {})


def accept_recorded_training(tmp_path: Path) -> RunRecord:
    return accept_training(training_dataset(tmp_path), PLAN)


def samplers_in(table: str) -> list[str]:
    """The sampler column's cells, each put back together from its folded lines."""
    lines = table.splitlines()
    header = next(line for line in lines if " sampler " in line)
    left, right = header.index("sampler"), header.index(" att ")
    cells: list[str] = []
    for line in lines[lines.index(header) + 2 :]:
        if line[:left].strip():
            cells.append(line[left:right].strip())
        elif line.strip():
            cells[-1] += line[left:right].strip()
    return cells
