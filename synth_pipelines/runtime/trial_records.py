"""Retained trial records: the Harbor trial directory archived in the object store.

The archive is what regrade restores; its artifacts digest names the exact work a
verifier or judge assessed.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

from synth_pipelines.storage.objectstore import ObjectRef, ObjectStore


def directory_digest(directory: Path) -> str | None:
    """sha256 over sorted `relpath NUL sha256(file) LF` lines, as Harbor hashes tasks."""
    if not directory.is_dir():
        return None
    outer = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink()):
        inner = hashlib.sha256(path.read_bytes()).hexdigest()
        outer.update(f"{path.relative_to(directory).as_posix()}\0{inner}\n".encode())
    return f"sha256:{outer.hexdigest()}"


RATIONALE_CHARS = 4000


def read_rationale(trial_dir: Path) -> str | None:
    """A judge's rationale, when the trial's verifier left one."""
    path = trial_dir / "verifier" / "rationale.md"
    return path.read_text(errors="replace")[:RATIONALE_CHARS] if path.is_file() else None


def archive_trial(store: ObjectStore, trial_dir: Path, key: str) -> ObjectRef:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(trial_dir, arcname=trial_dir.name)
    return store.put(key, buffer.getvalue())


def restore_trial(store: ObjectStore, key: str, sha256: str, into: Path) -> Path:
    """Extract a retained trial under `into`; returns the trial directory."""
    data = store.get(key, expected_sha256=sha256)
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = {member.name.split("/", 1)[0] for member in tar.getmembers()}
        tar.extractall(into, filter="data")
    (name,) = names
    return into / name
