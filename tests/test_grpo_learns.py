"""GRPO through the whole platform raises a real model's reward, with no warm start.

The seeded learner (a Qwen3-architecture model, not a scripted one) answers tasks whose
verifier accepts any one-word reply in lowercase ASCII; untrained, about a fifth of its
replies pass. Four batches run through the sandbox, the capture proxy, Harbor's
verifier, qualification, datums, the importance-sampling loss and checkpoints. Every
batch must apply its optimizer step, and the mean training reward of the last two
batches must exceed the first two's by at least MARGIN, fixed before the run with the
plan's seed.
"""

import json

import pytest

from synth_pipelines.config import Settings
from synth_pipelines.control.checkpoints import run_checkpoints
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.policy_updates import run_updates
from tests.live_services import platform
from tests.lowercase_word_tasks import PROFILE, lowercase_word_dataset
from tests.training_runs import accept_training, refreshed, run_batch

PLAN = {
    "groups_per_batch": 4,
    "attempts_per_group": 8,
    "batches": 4,
    "learning_rate": 0.00005,
    "lora_rank": 8,
    "loss": "importance_sampling",
    "max_tokens": 1,
    "temperature": 0.3,
    "seed": 7,
    "eligibility": {"drop_constant_reward_groups": True, "min_qualified_attempts": 2},
    "budget": {"max_active_attempts": 2, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
}
MARGIN = 0.15
"""Mean reward of batches 2-3 minus that of batches 0-1; chosen before the run."""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_grpo_raises_the_training_reward_of_a_real_model_without_a_warm_start(
    state, tmp_path, monkeypatch
):
    with platform(monkeypatch, scripted=False):
        run = accept_training(lowercase_word_dataset(tmp_path / "words"), PLAN, profile=PROFILE)
        for index in range(PLAN["batches"]):
            result = run_batch(run, index)
            assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert refreshed(run).status == "succeeded"
    engine = control_engine(Settings())
    updates = run_updates(engine, run.run_id)
    rewards = [update.metrics.reward_mean for update in updates]
    summary = json.dumps(
        [
            {
                k: getattr(u.metrics, k)
                for k in ("reward_mean", "frac_mixed", "kl_sample_train_v1", "grad_norm")
            }
            for u in updates
        ]
    )
    print(f"per batch: {summary}")
    assert [u.metrics.optimizer_step for u in updates] == [True] * 4, summary
    assert [c.optimizer_steps for c in run_checkpoints(engine, run.run_id)] == [1, 2, 3, 4]
    assert 0.05 < rewards[0] < 0.6, summary
    gain = (rewards[2] + rewards[3]) / 2 - (rewards[0] + rewards[1]) / 2
    assert gain >= MARGIN, summary
