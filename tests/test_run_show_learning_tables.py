"""`synth run show` prints the per-batch learning tables only for runs that trained."""

from __future__ import annotations

import io

from rich.console import Console

from synth_pipelines.cli.batch_learning import learning_tables


def test_a_run_without_training_batches_prints_no_learning_tables():
    assert learning_tables([]) == []


def test_a_batch_row_reads_whole_in_an_80_column_terminal():
    row = {
        "batch_index": 12,
        "status": "acknowledged",
        "reward_mean": 0.6875,
        "reward_std": 0.4635,
        "frac_mixed": 0.875,
        "frac_all_good": 0.125,
        "frac_all_bad": 0.0,
        "groups_used": 7,
        "groups": 8,
        "datums": 109,
        "action_tokens_per_turn": 16.2,
        "optimizer_step": True,
        "learning_rate": 3e-4,
        "loss": -2.0412,
        "grad_norm": 554.31,
        "entropy": 0.0231,
        "kl_sample_train_v1": 6.1e-5,
        "kl_sample_train_v2": -6.9e-10,
        "sampling_sec": 96.4,
        "forward_backward_sec": 17.93,
        "optim_step_sec": 0.04,
    }
    console = Console(width=80, record=True, file=io.StringIO())
    for table in learning_tables([row]):
        console.print(table)
    text = console.export_text()
    assert "…" not in text
    for cell in ("-2.04", "554", "6.1e-05", "-6.9e-10", "0.688", "7/8", "109", "yes"):
        assert cell in text
