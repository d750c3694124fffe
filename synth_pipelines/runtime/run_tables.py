"""A run's tables as Arrow (every attempt's outcome, every assessor's verdicts, every
captured model call with its tokens), and writing one as Parquet or CSV with polars."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
from sqlalchemy import Engine

from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.contracts.table import parquet_to_table
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.table_outputs import TableMissingError, load_table, table_history
from synth_pipelines.evidence.reader import read_attempt_evidence, run_attempts
from synth_pipelines.storage.objectstore import ObjectStore


class EvidenceUnreadableError(Exception):
    """Some attempt's evidence fails its integrity check: nothing is exported."""


def outcomes(engine: Engine, store: ObjectStore, run: RunRecord) -> pa.Table:
    """Every attempt's trial outcome, batch by batch; batches not run yet have none."""
    tables = [TrialOutcome.arrow_schema().empty_table()]
    for index in range(run.batch_count):
        try:
            table = load_table(engine, store, "trials", batch_key(run.run_id, index))
        except TableMissingError:
            continue
        tables.append(TrialOutcome.check(table))
    return pa.concat_tables(tables)


def assessments(engine: Engine, store: ObjectStore, run: RunRecord) -> pa.Table:
    """Every assessor's verdicts (the tasks' verifiers, judges, regrades), one row each:
    a re-materialized partition repeats an assessment, and its newest version is kept."""
    latest: dict[str, Assessment] = {}
    for index in range(run.batch_count):
        for ref in table_history(engine, "assessments", batch_key(run.run_id, index)):
            table = parquet_to_table(store.get(ref.key, expected_sha256=ref.sha256))
            for row in Assessment.from_table(table):
                latest[row.assessment_id] = row
    return Assessment.to_table(list(latest.values()))


def evidence(engine: Engine, store: ObjectStore, run: RunRecord) -> pa.Table:
    """Every captured model call, with its prompt and sampled token ids and logprobs, in
    attempt and call order; refused if any chunk fails its integrity check."""
    evidence = read_attempt_evidence(engine, store, run_attempts(engine, run.run_id))
    if evidence.problems:
        attempt, problem = sorted(evidence.problems.items())[0]
        raise EvidenceUnreadableError(
            f"the evidence of {len(evidence.problems)} attempt(s) of {run.run_id} cannot be "
            f"read back, e.g. {attempt}: {problem}; nothing was exported"
        )
    calls = [call for attempt in sorted(evidence.calls) for call in evidence.calls[attempt]]
    return Interaction.to_table(calls)


READERS = {"outcomes": outcomes, "assessments": assessments, "evidence": evidence}


def write_table(table: pa.Table, out: Path, file_format: str) -> None:
    """Write through a temporary file beside `out`, so a failed export leaves no partial file."""
    import polars as pl

    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    if file_format == "csv":
        # CSV has no lists: token ids and logprobs become JSON arrays in a text cell.
        frame = frame.with_columns(
            pl.Series(name, [json.dumps(value) for value in frame[name].to_list()], pl.String)
            for name, dtype in frame.schema.items()
            if dtype.is_nested()
        )
        # A spreadsheet runs a cell that starts with one of these as a formula, and agents
        # choose some of this text (their headers, their errors): such a cell is prefixed
        # with a quote, as OWASP's advice on CSV injection says.
        frame = frame.with_columns(
            pl.col(name).str.replace(r"^([=+\-@\t\r])", "'${1}")
            for name, dtype in frame.schema.items()
            if dtype == pl.String
        )
    descriptor, temporary = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    os.close(descriptor)
    try:
        if file_format == "csv":
            frame.write_csv(temporary)
        else:
            frame.write_parquet(temporary)
        os.replace(temporary, out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
