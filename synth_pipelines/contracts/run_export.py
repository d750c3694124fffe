"""A run's table exported for its owner (`synth run export`): which table, in which file
format, and what it holds."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

from synth_pipelines.contracts.read_grant import ReadGrant

TableName = Literal["outcomes", "assessments", "evidence"]
FileFormat = Literal["parquet", "csv"]
TABLE_NAMES: tuple[str, ...] = get_args(TableName)
FILE_FORMATS: tuple[str, ...] = get_args(FileFormat)


class ExportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    what: TableName
    format: FileFormat = "parquet"


class ExportedTable(BaseModel):
    """One of a run's tables as a file: its rows and columns."""

    run_id: str
    what: str
    format: str
    rows: int
    columns: list[str]


class RunExport(ExportedTable):
    """The exported file, stored under the run, and the grant to read it by."""

    download: ReadGrant
