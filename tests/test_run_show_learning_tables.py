"""`synth run show` prints the per-batch learning tables only for runs that trained, and
shows every recorded batch, whichever numbers it was recorded with."""

from __future__ import annotations

import io

from rich.console import Console

from synth_pipelines.cli.batch_learning import learning_tables
from synth_pipelines.config import Settings
from synth_pipelines.contracts.batch_learning import BatchLearning
from synth_pipelines.contracts.policy_update import BatchLearningRow
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.policy_updates import acknowledge, mark_unresolved
from synth_pipelines.runtime.run_reports import learning_rows


def test_a_run_without_training_batches_prints_no_learning_tables():
    assert learning_tables([]) == []


PACKED = {
    "calls_per_attempt_mean": 6.4,
    "calls_per_attempt_max": 11,
    "datums_per_attempt_mean": 1.5,
    "datums_per_attempt_max": 3,
    "new_datum_reasons": {"delegated_agent": 4, "prompt_rewrote_history": 12},
}


def _text(rows: list[BatchLearningRow]) -> str:
    console = Console(width=80, record=True, file=io.StringIO())
    for table in learning_tables(rows):
        console.print(table)
    return console.export_text()


def test_a_batch_row_reads_whole_in_an_80_column_terminal():
    row = {
        "batch": "r-1.b0012",
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
        **PACKED,
    }
    text = _text([BatchLearningRow.model_validate(row)])
    assert "…" not in text
    for cell in ("-2.04", "554", "6.1e-05", "-6.9e-10", "0.688", "7/8", "109", "yes"):
        assert cell in text
    packing = text[text.index("learning per batch: packing") : text.index("per batch: update")]
    for header in ("calls/attempt", "datums/attempt", "new datum because"):
        assert header in packing
    for cell in ("6.4 (max 11)", "1.5 (max 3)", "4 delegated_agent", "12 prompt_rewrote_history"):
        assert cell in packing


def test_a_batch_recorded_before_packing_was_counted_still_shows_with_dashes(state):
    engine = control_engine(Settings())
    signal = {"attempts": 4, "assessed": 4, "reward_mean": 0.5, "groups": 2, "groups_used": 2}
    step = {"optimizer_step": True, "learning_rate": 1e-4, "loss": -0.5, "grad_norm": 2.0}
    for index, metrics in enumerate([{**signal, **step}, {**signal, **step, **PACKED}]):
        batch = batch_key("r-1", index)
        mark_unresolved(engine, "r-1", batch, index, datums=4)
        acknowledge(engine, "r-1", batch, f"tinker://r-1/state/{index}", BatchLearning(**metrics))
    rows = learning_rows(engine, "r-1")
    older, newer = rows
    assert older.datums_per_attempt_mean is None and older.new_datum_reasons is None
    assert newer.calls_per_attempt_max == 11
    assert newer.new_datum_reasons == PACKED["new_datum_reasons"]
    text = _text(rows)
    packing = text[text.index("learning per batch: packing") : text.index("per batch: update")]
    lines = [line.split() for line in packing.splitlines()]
    assert ["0", "-", "-", "-"] in lines
    assert ["1", "6.4", "(max", "11)", "1.5", "(max", "3)", "4", "delegated_agent"] in lines
