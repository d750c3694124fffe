"""Where the platform's state lives by default: plain functions of the configured values,
and how it is kept to its owner.

The settings (`config.py`) derive their locations with these, and so does the start-up
path of `synth run show --json` (`cli/run_show_fast.py`), which answers before pydantic
is loaded: one definition, so both always look in the same place.

The state directory holds the control database, the objects, the evidence spool, the
signing key and the services' logs: nothing in it is for another user of the host. Its
own mode (0700) closes all of it whatever the modes below, and the processes that write
it create owner-only files besides (`OWNER_ONLY_UMASK`, set where they start: the `synth`
executable and the services it supervises). A sandbox never walks a host path below it:
the controller, as root, attaches what a sandbox sees (`sandbox/attach.py`, overlays
under `/run/synth-overlays`), so closing it costs the sandboxes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

OWNER_ONLY_UMASK = 0o077
"""What a process that writes platform state creates files with: directories 0700, files
0600 (Python's, SQLite's and the services' defaults, under this mask)."""
PRIVATE_DIRECTORY_MODE = 0o700


DEFAULT_GATEWAY_URL = "http://127.0.0.1:8300"
"""The embedded default's gateway, on loopback."""


def operator_key_path(state: Path) -> Path:
    """The local operator's gateway key (an admin's), written at the first `synth up`."""
    return state / "operator.key"


def find_project_root() -> Path:
    """The checkout holding this package (an editable install), else the nearest directory
    above the working directory holding `workspace.yaml`, else the working directory."""
    for start in (Path(__file__).resolve().parent, Path.cwd().resolve()):
        for candidate in (start, *start.parents):
            if (candidate / "workspace.yaml").is_file() and (
                candidate / "pyproject.toml"
            ).is_file():
                return candidate
    return Path.cwd().resolve()


def state_dir(data_dir: Path | None, project_root: Path) -> Path:
    return (data_dir or project_root / ".synth").resolve()


def control_database_url(database_url: str | None, state: Path) -> str:
    return database_url or f"sqlite:///{state / 'control.db'}"


def objects_url(object_store_url: str | None, state: Path) -> str:
    return object_store_url or f"file://{state / 'objects'}"


def keep_private(directory: Path) -> None:
    """Make `directory` (the state directory, a Dagster home) its owner's alone: made 0700
    when missing, and closed to 0700 when other users may enter it, as one made before
    this was. A passage its owner gave one group (the production deployment's database
    server, `services/production.py`) stays; another user's directory is its owner's to
    close."""
    directory.mkdir(mode=PRIVATE_DIRECTORY_MODE, parents=True, exist_ok=True)
    found = directory.stat()
    if found.st_mode & 0o007 and found.st_uid == os.geteuid():
        directory.chmod(PRIVATE_DIRECTORY_MODE)
