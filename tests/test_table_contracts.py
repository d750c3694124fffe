"""A stored table reads only with the schema its contract declares; a contract grows only
by nullable columns at its end, which a table stored before them reads as null."""

from __future__ import annotations

import pyarrow as pa
import pytest

from synth_pipelines.contracts.exclusion import ExclusionReason
from synth_pipelines.contracts.learning import QualifiedAttempt
from synth_pipelines.contracts.table import SchemaMismatchError

ADDED = ("exclusion_reason", "group_exclusion_reason")


def _attempt(**changes: object) -> QualifiedAttempt:
    fields: dict[str, object] = {
        "run_id": "r-1",
        "batch": "r-1.b0000",
        "attempt_id": "a-1",
        "trial_id": "t-1",
        "group_index": 0,
        "task_name": "task",
        "reward": None,
        "calls": 0,
        "qualified": False,
        "exclusion": "no captured model calls",
        "group_qualified": True,
        "group_exclusion": None,
        "advantage": None,
        "exclusion_reason": ExclusionReason.NO_CALLS,
        "group_exclusion_reason": None,
    }
    return QualifiedAttempt.model_validate({**fields, **changes})


def _stored_before_reasons(table: pa.Table) -> pa.Table:
    """The table as the contract wrote it before exclusions carried their kind."""
    return table.drop_columns(list(ADDED))


def test_a_table_stored_before_nullable_columns_were_added_reads_them_as_null():
    table = QualifiedAttempt.to_table([_attempt()])
    (row,) = QualifiedAttempt.from_table(_stored_before_reasons(table))
    assert row.exclusion == "no captured model calls"
    assert row.exclusion_reason is None
    assert row.group_exclusion_reason is None


def test_the_current_schema_reads_as_written():
    (row,) = QualifiedAttempt.from_table(QualifiedAttempt.to_table([_attempt()]))
    assert row == _attempt()


@pytest.mark.parametrize(
    "damage",
    [
        lambda table: table.drop_columns(["calls"]),
        lambda table: table.drop_columns(["advantage", *ADDED]),
        lambda table: table.set_column(
            table.schema.get_field_index("calls"), "calls", pa.array(["0"], pa.string())
        ),
        lambda table: table.append_column("extra", pa.array([1], pa.int64())),
    ],
    ids=["a-middle-column-missing", "a-required-column-missing", "a-type-changed", "an-extra"],
)
def test_any_other_difference_is_refused(damage):
    with pytest.raises(SchemaMismatchError):
        QualifiedAttempt.from_table(damage(QualifiedAttempt.to_table([_attempt()])))
