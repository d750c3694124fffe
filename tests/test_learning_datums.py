"""Datums from captured calls, checked against hand-computed expectations.

A multi-call attempt whose second call extends the first (packed into one datum), whose
third call breaks the prefix (a new datum), and which delegated to a subagent (its own
trajectory, the attempt's advantage)."""

import pytest

from synth_pipelines.contracts.learning import QualifiedAttempt
from synth_pipelines.learning.datums import attempt_datums, training_datum
from tests.learning_records import call


def _standing(advantage: float) -> QualifiedAttempt:
    return QualifiedAttempt(
        run_id="r-1",
        batch="r-1.b0000",
        attempt_id="a0",
        trial_id="trial-a0",
        group_index=0,
        task_name="t/task",
        reward=1.0,
        calls=4,
        qualified=True,
        exclusion=None,
        group_qualified=True,
        group_exclusion=None,
        advantage=advantage,
        exclusion_reason=None,
        group_exclusion_reason=None,
    )


CALLS = [
    call("a0", 0, [1, 2, 3], [10, 11], [-0.1, -0.2]),
    call("a0", 1, [1, 2, 3, 10, 11, 20], [30], [-0.3]),
    call("a0", 2, [99, 98], [40, 41], [-0.4, -0.5]),
    call("a0", 0, [5, 6], [7], [-0.6], agent="sub-1"),
    call("a0", 3, [1, 2], [3], [-0.9], role="judge"),
]


def test_datums_pack_extensions_split_broken_prefixes_and_keep_subagents_apart():
    rows = attempt_datums(_standing(0.5), CALLS)
    got = [
        (r.agent_id, r.model_input, r.target_tokens, r.logprobs, r.advantages, r.mask) for r in rows
    ]
    assert got == [
        (
            "main",
            [1, 2, 3, 10, 11, 20],
            [2, 3, 10, 11, 20, 30],
            pytest.approx([0.0, 0.0, -0.1, -0.2, 0.0, -0.3]),
            [0, 0, 0.5, 0.5, 0, 0.5],
            [0, 0, 1, 1, 0, 1],
        ),
        (
            "main",
            [99, 98, 40],
            [98, 40, 41],
            pytest.approx([0.0, -0.4, -0.5]),
            [0, 0.5, 0.5],
            [0, 1, 1],
        ),
        ("sub-1", [5, 6], [6, 7], pytest.approx([0.0, -0.6]), [0, 0.5], [0, 1]),
    ]
    assert [r.datum_index for r in rows] == [0, 1, 0]


def test_training_datum_carries_the_loss_inputs_without_the_mask():
    (row, *_) = attempt_datums(_standing(-0.25), CALLS)
    datum = training_datum(row)
    assert datum.model_input.to_ints() == row.model_input
    assert set(datum.loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"}
    assert datum.loss_fn_inputs["advantages"].tolist() == [0, 0, -0.25, -0.25, 0, -0.25]
