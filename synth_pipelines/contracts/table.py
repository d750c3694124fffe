"""Parquet tables whose schema is declared once, by a pydantic row model.

The pyarrow schema is derived from the row model's annotations, tables are written
from validated rows, and every read checks the stored schema against the declared one
before any row is used. Arrow is imported where a table is built or read, not with the
row models: the CLI's JSON documents are made of them, and printing one needs no Arrow.
"""

from __future__ import annotations

import io
import types
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Self, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import pyarrow as pa


class SchemaMismatchError(Exception):
    """A stored table does not have the schema its contract declares."""


def _arrow_type(annotation: Any) -> tuple[pa.DataType, bool]:
    """(arrow type, nullable) for a field annotation."""
    import pyarrow as pa

    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) != 1:
            raise TypeError(f"table fields allow only 'X | None' unions, not {annotation}")
        return _arrow_type(members[0])[0], True
    if origin is list:
        (item,) = get_args(annotation)
        return pa.list_(_arrow_type(item)[0]), False
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return pa.string(), False
    scalars: dict[Any, pa.DataType] = {
        str: pa.string(),
        int: pa.int64(),
        float: pa.float64(),
        bool: pa.bool_(),
        datetime: pa.timestamp("us", tz="UTC"),
    }
    if annotation in scalars:
        return scalars[annotation], False
    raise TypeError(f"no Parquet type for table field annotation {annotation}")


class TableRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    added_columns: ClassVar[tuple[str, ...]] = ()
    """Nullable columns declared last, after tables of this contract were already stored."""

    @classmethod
    def arrow_schema(cls) -> pa.Schema:
        import pyarrow as pa

        fields = []
        for name, info in cls.model_fields.items():
            arrow_type, nullable = _arrow_type(info.annotation)
            fields.append(pa.field(name, arrow_type, nullable=nullable))
        return pa.schema(fields)

    @classmethod
    def to_table(cls, rows: Sequence[Self]) -> pa.Table:
        import pyarrow as pa

        schema = cls.arrow_schema()
        columns = {name: [getattr(row, name) for row in rows] for name in schema.names}
        return pa.Table.from_pydict(columns, schema=schema)

    @classmethod
    def check(cls, table: pa.Table) -> pa.Table:
        """The stored table, refused unless its schema is the declared one, or the declared
        one without some of its `added_columns` at its end: a table stored before they were
        added reads with them null (not recorded then), never with a guessed value."""
        import pyarrow as pa

        expected = cls.arrow_schema()
        added = list(expected)[len(table.schema) :]
        older = pa.schema(list(expected)[: len(table.schema)])
        if not (
            table.schema.equals(older, check_metadata=False)
            and all(field.name in cls.added_columns and field.nullable for field in added)
        ):
            raise SchemaMismatchError(
                f"{cls.__name__} table has schema\n{table.schema}\nbut its contract declares\n"
                f"{expected}"
            )
        for field in added:
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
        return table

    @classmethod
    def from_table(cls, table: pa.Table) -> list[Self]:
        return [cls.model_validate(row) for row in cls.check(table).to_pylist()]


def table_to_parquet(table: pa.Table) -> bytes:
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def parquet_to_table(data: bytes) -> pa.Table:
    """Decode on this thread and leave nothing on Arrow's thread pools. `pq.read_table`
    pre-buffers on an I/O pool thread; when that thread drops the last reference to a
    Python-owned buffer after the interpreter has begun to finalize, the process aborts
    ("terminate called without an active exception") after it has done its work."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pq.ParquetFile(pa.BufferReader(data), pre_buffer=False).read(use_threads=False)
