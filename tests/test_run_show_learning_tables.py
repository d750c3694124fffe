"""`synth run show` prints the per-batch learning tables only for runs that trained."""

from __future__ import annotations

from synth_pipelines.cli.batch_learning import learning_tables


def test_a_run_without_training_batches_prints_no_learning_tables():
    assert learning_tables([]) == []
