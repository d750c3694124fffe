"""The local operator's gateway key: made at the first `synth up`, an admin's, in a file.

The embedded default has one operator, the one who runs it (`SYNTH_OWNER`). Their key is
written once to `operator_key_path` (owner-only, as the whole state directory), where
every `synth` command of that state directory finds it without `SYNTH_API_KEY`. A key
that no longer stands (revoked, or a control database made anew) is replaced.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Engine

from synth_pipelines.contracts.operator_key import LOCAL_ORG, KeyRequest
from synth_pipelines.control.operator_keys import KeyRefusedError, authenticate, create_key


def ensure_operator_key(engine: Engine, key_secret: bytes, path: Path, owner: str) -> bool:
    """Make sure `path` holds a standing admin key of `owner`; True when one was made."""
    try:
        with engine.connect() as conn:
            authenticate(conn, key_secret, path.read_text().strip())
        return False
    except (FileNotFoundError, KeyRefusedError):
        pass
    created = create_key(engine, key_secret, KeyRequest(owner=owner, org=LOCAL_ORG, role="admin"))
    path.parent.mkdir(parents=True, exist_ok=True)
    pending = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as sink:
        sink.write(created.secret + "\n")
    pending.replace(path)
    return True
