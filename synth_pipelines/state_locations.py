"""Where the platform's state lives by default: plain functions of the configured values.

The settings (`config.py`) derive their locations with these, and so does the start-up
path of `synth run show --json` (`cli/run_show_fast.py`), which answers before pydantic
is loaded: one definition, so both always look in the same place.
"""

from __future__ import annotations

from pathlib import Path


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
