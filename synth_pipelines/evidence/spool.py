"""The durable local spool: a call is staged here before its response completes.

Each staged call is one file (`staged_call`): the proxy writes its prompt part while the
model samples and appends its completion part once sampling ends, flushing each to disk;
a crash leaves either a complete, checksummed record or one whose response never completed,
which is discarded at the next start. Publishing reads calls back memory-mapped, without
decoding. A publish intent lists the calls of one chunk before the chunk is uploaded; after
a crash the same intent is completed with the same calls, so the same bytes are published
under the same key and no call is published twice.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.evidence import staged_call

STAGED_SUFFIX = ".call"


def _sync_directory(path: Path) -> None:
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _write_all(descriptor: int, *parts: bytes | pa.Buffer) -> None:
    for part in parts:
        view = memoryview(part)
        while view:
            view = view[os.write(descriptor, view) :]


def _write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _sync_directory(path.parent)


@dataclass(frozen=True)
class PublishIntent:
    chunk_id: str
    run_id: str
    batch: str | None
    attempt_id: str
    call_ids: tuple[str, ...]


@dataclass(frozen=True)
class StagedCall:
    """What publishing needs to know of a staged call before reading the whole of it."""

    call_id: str
    run_id: str
    batch: str | None
    attempt_id: str
    created_at: datetime


@dataclass(frozen=True)
class StagedPrompt:
    """A call whose prompt part is durable; its completion part is still to come."""

    call_id: str
    path: Path
    descriptor: int
    prompt: tuple[int, int]
    """The prompt part's size and CRC-32."""


class Spool:
    def __init__(self, root: Path):
        self.root = root
        self.staged_dir = root / "staged"
        self.intents_dir = root / "intents"
        self.staged_dir.mkdir(parents=True, exist_ok=True)
        self.intents_dir.mkdir(parents=True, exist_ok=True)
        self._summaries: dict[str, StagedCall] = {}

    def _staged_path(self, call_id: str) -> Path:
        return self.staged_dir / f"{call_id}{STAGED_SUFFIX}"

    def stage(self, interaction: Interaction) -> None:
        """Stage a whole call at once."""
        staged = self.stage_prompt(
            interaction.call_id,
            interaction.prompt_tokens,
            interaction.request_json,
            interaction.effective_request_json,
        )
        self.stage_completion(staged, interaction)

    def stage_prompt(
        self,
        call_id: str,
        prompt_tokens: list[int],
        request_json: str,
        effective_request_json: str | None,
    ) -> StagedPrompt:
        """Write a call's prompt part, durably, under the call's name."""
        prompt = staged_call.prompt_part(
            call_id, prompt_tokens, request_json, effective_request_json
        )
        path = self._staged_path(call_id)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(descriptor, prompt)
            os.fsync(descriptor)
            _sync_directory(self.staged_dir)
        except BaseException:
            os.close(descriptor)
            path.unlink(missing_ok=True)
            raise
        return StagedPrompt(call_id, path, descriptor, staged_call.checksum(prompt))

    def stage_completion(self, staged: StagedPrompt, interaction: Interaction) -> None:
        """Append the rest of the call and flush it: the call is staged when this returns.

        The prompt columns are the ones `stage_prompt` wrote, from the same prompt."""
        try:
            if interaction.call_id != staged.call_id:
                raise ValueError(
                    f"completion of call {interaction.call_id} given for call {staged.call_id}"
                )
            completion = staged_call.completion_part(interaction)
            trailer = staged_call.trailer(staged.prompt, staged_call.checksum(completion))
            _write_all(staged.descriptor, completion, trailer)
            os.fdatasync(staged.descriptor)
        finally:
            os.close(staged.descriptor)

    def discard(self, staged: StagedPrompt) -> None:
        """Drop a call that will not complete (its sampling failed or its client left)."""
        os.close(staged.descriptor)
        staged.path.unlink(missing_ok=True)

    def discard_incomplete(self) -> int:
        """Remove calls whose responses never completed; only while no call is being staged."""
        incomplete = [
            path
            for path in map(self._staged_path, self._call_ids())
            if not staged_call.is_whole(path)
        ]
        for path in incomplete:
            path.unlink()
        return len(incomplete)

    def _read(self, call_id: str) -> pa.Table:
        return staged_call.read(self._staged_path(call_id))

    def load_table(self, call_ids: list[str] | tuple[str, ...]) -> pa.Table:
        """The staged calls as one `Interaction` table, in the order given."""
        return pa.concat_tables([self._read(call_id) for call_id in call_ids]).combine_chunks()

    def staged(self) -> list[StagedCall]:
        """Every call staged whole; a staged file never changes once whole, so each is read
        (and checked whole) once."""
        calls = []
        for call_id in self._call_ids():
            known = self._summaries.get(call_id)
            if known is None:
                path = self._staged_path(call_id)
                if not staged_call.is_complete(path):
                    continue
                row = staged_call.completion_columns(
                    path, ["run_id", "batch", "attempt_id", "created_at"]
                )
                known = self._summaries[call_id] = StagedCall(call_id=call_id, **row)
            calls.append(known)
        return calls

    def staged_call_ids(self) -> list[str]:
        """Calls staged whole (not the ones still being staged)."""
        return [
            call_id
            for call_id in self._call_ids()
            if staged_call.is_complete(self._staged_path(call_id))
        ]

    def _call_ids(self) -> list[str]:
        """Every staged file's call id, in order; names, not paths, since the publisher lists
        the spool every pass and sorting paths cost it more than the listing."""
        return sorted(
            name.removesuffix(STAGED_SUFFIX)
            for name in os.listdir(self.staged_dir)
            if name.endswith(STAGED_SUFFIX)
        )

    def intents(self) -> list[PublishIntent]:
        found = []
        for path in sorted(self.intents_dir.glob("*.json")):
            data = json.loads(path.read_bytes())
            found.append(PublishIntent(**{**data, "call_ids": tuple(data["call_ids"])}))
        return found

    def write_intent(
        self, run_id: str, batch: str | None, attempt_id: str, call_ids: list[str]
    ) -> PublishIntent:
        intent = PublishIntent(uuid.uuid4().hex, run_id, batch, attempt_id, tuple(call_ids))
        payload = {**intent.__dict__, "call_ids": list(intent.call_ids)}
        _write_durably(self.intents_dir / f"{intent.chunk_id}.json", json.dumps(payload).encode())
        return intent

    def finish(self, intent: PublishIntent) -> None:
        """Forget a published chunk: its calls first, then the intent naming them."""
        for call_id in intent.call_ids:
            self._staged_path(call_id).unlink(missing_ok=True)
            self._summaries.pop(call_id, None)
        (self.intents_dir / f"{intent.chunk_id}.json").unlink(missing_ok=True)

    def pending(self) -> int:
        return len(self.staged_call_ids())
