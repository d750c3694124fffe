"""One staged call on disk: its prompt part first, its completion part once sampling ends.

Most of a call's evidence is its prompt (token ids and request JSON), which is known
before sampling; it is written and made durable while the model samples, so all that is
left when the completion arrives is a small append and one flush. A file holds two Arrow
IPC streams, the prompt columns and then the other `Interaction` columns, and a trailer
with the length and CRC-32 of each. A file without a valid trailer is a call whose
response never completed.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa

from synth_pipelines.contracts.interaction import Interaction

PROMPT_COLUMNS = ("call_id", "prompt_tokens", "request_json", "effective_request_json")
_TRAILER = struct.Struct("<QIQI8s")
_MAGIC = b"SYNCALL1"
_SCHEMA = Interaction.arrow_schema()
PROMPT_SCHEMA = pa.schema([_SCHEMA.field(name) for name in PROMPT_COLUMNS])
COMPLETION_SCHEMA = pa.schema([field for field in _SCHEMA if field.name not in PROMPT_COLUMNS])


class TornCallError(Exception):
    """A staged call whose bytes do not match its trailer (written when the machine failed)."""


def _stream(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def prompt_part(
    call_id: str, prompt_tokens: list[int], request_json: str, effective_request_json: str | None
) -> pa.Buffer:
    columns = {
        "call_id": [call_id],
        "prompt_tokens": [prompt_tokens],
        "request_json": [request_json],
        "effective_request_json": [effective_request_json],
    }
    return _stream(pa.table(columns, schema=PROMPT_SCHEMA))


def completion_part(interaction: Interaction) -> pa.Buffer:
    columns = {name: [getattr(interaction, name)] for name in COMPLETION_SCHEMA.names}
    return _stream(pa.table(columns, schema=COMPLETION_SCHEMA))


def checksum(part: pa.Buffer) -> tuple[int, int]:
    """(size, CRC-32) of a part, as the trailer records it."""
    return part.size, zlib.crc32(part)


def trailer(prompt: tuple[int, int], completion: tuple[int, int]) -> bytes:
    return _TRAILER.pack(*prompt, *completion, _MAGIC)


def _trailer_of(size: int, tail: bytes) -> tuple[int, int, int, int] | None:
    """The trailer's (sizes, CRCs) if it accounts for a file of `size` bytes."""
    if size < _TRAILER.size or len(tail) != _TRAILER.size:
        return None
    prompt_size, prompt_crc, completion_size, completion_crc, magic = _TRAILER.unpack(tail)
    if magic != _MAGIC or prompt_size + completion_size + _TRAILER.size != size:
        return None
    return prompt_size, prompt_crc, completion_size, completion_crc


def is_complete(path: Path) -> bool:
    """Whether the file ends in a trailer that accounts for all of it (CRCs not checked)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - _TRAILER.size))
            # Read the trailer's size only: the proxy may be appending the completion to a
            # file that was still a bare prompt when its size was taken.
            return _trailer_of(size, handle.read(_TRAILER.size)) is not None
    except FileNotFoundError:
        return False


def _parts(path: Path, *, verify: bool = True) -> tuple[pa.Buffer, pa.Buffer]:
    with pa.memory_map(str(path)) as source:
        data = source.read_buffer()
    found = _trailer_of(data.size, data[max(0, data.size - _TRAILER.size) :].to_pybytes())
    if found is None:
        raise TornCallError(f"staged call {path.name} has no trailer: it never completed")
    prompt_size, prompt_crc, completion_size, completion_crc = found
    prompt = data.slice(0, prompt_size)
    completion = data.slice(prompt_size, completion_size)
    if verify and (zlib.crc32(prompt) != prompt_crc or zlib.crc32(completion) != completion_crc):
        raise TornCallError(f"staged call {path.name} does not match its trailer's checksums")
    return prompt, completion


def completion_columns(path: Path, columns: list[str]) -> dict[str, Any]:
    """Some of a complete call's completion columns, without reading its prompt part."""
    _, completion = _parts(path, verify=False)
    row: dict[str, Any] = pa.ipc.open_stream(completion).read_all().select(columns).to_pylist()[0]
    return row


def is_whole(path: Path) -> bool:
    """Complete, with every byte matching the trailer's checksums."""
    try:
        _parts(path)
    except TornCallError:
        return False
    return True


def read(path: Path) -> pa.Table:
    """The staged call as a one-row `Interaction` table, its bytes checked first."""
    parts = [pa.ipc.open_stream(part).read_all() for part in _parts(path)]
    columns = {name: table[name] for table in parts for name in table.column_names}
    return Interaction.check(pa.table(columns, schema=_SCHEMA))
