"""The durable local spool: a call is staged here before its response completes.

Each staged call is one file written with write-fsync-rename, so a crash leaves either
the whole record or nothing. A publish intent lists the calls of one chunk before the
chunk is uploaded; after a crash the same intent is completed with the same calls, so
the same bytes are published under the same key and no call is published twice.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from synth_pipelines.contracts.interaction import Interaction


def _write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


@dataclass(frozen=True)
class PublishIntent:
    chunk_id: str
    run_id: str
    batch: str | None
    attempt_id: str
    call_ids: tuple[str, ...]


class Spool:
    def __init__(self, root: Path):
        self.staged_dir = root / "staged"
        self.intents_dir = root / "intents"
        self.staged_dir.mkdir(parents=True, exist_ok=True)
        self.intents_dir.mkdir(parents=True, exist_ok=True)

    def stage(self, interaction: Interaction) -> None:
        _write_durably(
            self.staged_dir / f"{interaction.call_id}.json", interaction.model_dump_json().encode()
        )

    def load(self, call_id: str) -> Interaction:
        return Interaction.model_validate_json((self.staged_dir / f"{call_id}.json").read_bytes())

    def staged_call_ids(self) -> list[str]:
        return sorted(p.stem for p in self.staged_dir.glob("*.json"))

    def intents(self) -> list[PublishIntent]:
        found = []
        for path in sorted(self.intents_dir.glob("*.json")):
            data = json.loads(path.read_bytes())
            found.append(PublishIntent(**{**data, "call_ids": tuple(data["call_ids"])}))
        return found

    def claimed_call_ids(self) -> set[str]:
        return {call for intent in self.intents() for call in intent.call_ids}

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
            (self.staged_dir / f"{call_id}.json").unlink(missing_ok=True)
        (self.intents_dir / f"{intent.chunk_id}.json").unlink(missing_ok=True)

    def pending(self) -> int:
        return len(self.staged_call_ids())
