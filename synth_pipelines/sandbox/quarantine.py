"""Setting aside a sandbox that cannot be removed, so that it blocks nothing after it.

Teardown kills and removes everything below a sandbox's cgroup, depth first. What can
still resist is outside the sandbox's control and rare (a process stuck in the kernel,
frozen by the host's freezer, on a hung filesystem), but it must not become every
later sandbox's problem: orphan reclaim runs before each process's first sandbox, and
one unremovable orphan used to fail all of them. So whatever cannot be removed is
quarantined instead:

- its cgroups are renamed `quarantined-<name>` beside themselves (their limits stay,
  so what still runs there stays bounded);
- its directory moves from `work/sandboxes/` to `work/quarantined-sandboxes/`, where
  reclaim never looks (its lease is removed first);
- `quarantine.json` there records why, when, and what to remove once it is free,
  and the caller logs a warning naming it.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from synth_pipelines.sandbox.limits import SandboxCgroup

QUARANTINE_DIR_NAME = "quarantined-sandboxes"
CGROUP_PREFIX = "quarantined-"
RECORD_NAME = "quarantine.json"


def quarantine(sandbox_dir: Path, cgroup: SandboxCgroup | None, problems: list[str]) -> Path:
    """Move what is left of the sandbox aside and record why; returns the record. The
    caller has released (removed) the sandbox's lease."""
    place = sandbox_dir.parent.with_name(QUARANTINE_DIR_NAME) / sandbox_dir.name
    place.parent.mkdir(parents=True, exist_ok=True)
    if sandbox_dir.exists():
        os.rename(sandbox_dir, place)
    else:
        place.mkdir()
    cgroups = [str(path) for path in cgroup.set_aside(CGROUP_PREFIX)] if cgroup else []
    record = place / RECORD_NAME
    record.write_text(
        json.dumps(
            {
                "sandbox": sandbox_dir.name,
                "quarantined_at": datetime.now(UTC).isoformat(),
                "problems": problems,
                "cgroups": cgroups,
                "remedy": (
                    "once nothing runs in these cgroups, remove them (rmdir, deepest "
                    "first) and this directory; unmount anything still mounted below it"
                ),
            },
            indent=2,
        )
    )
    return record
