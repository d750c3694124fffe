"""`synth run show RUN --json` answered at start-up, with the standard library only.

The full command needs typer, pydantic and httpx, whose imports alone take longer than a
researcher polling a run should wait. The gateway answers a run's results as the document
`run show --json` prints (`GET /v1/runs/{run}/results`), so here the request is made with
`http.client` (`urllib.request` imports email, mimetypes and more on top of it) and the
answer printed as it came. Anything else (another command, a gateway that
refuses or cannot be reached, TLS checked against the system's authorities, settings this
path does not read the way the settings do) goes to the full command, which says what is
wrong.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from urllib.parse import quote, urlsplit

from synth_pipelines import state_locations

EXIT_RUN_FAILED = 1
STOPPED = ("failed", "interrupted")
PREFIX = "SYNTH_"
TIMEOUT_SEC = 30


def requested_run(argv: list[str]) -> str | None:
    """The run id of exactly `run show RUN --json` (options in either order), else None."""
    if argv[:2] != ["run", "show"] or len(argv) != 4 or "--json" not in argv[2:]:
        return None
    (run_id,) = [arg for arg in argv[2:] if arg != "--json"]
    return None if run_id.startswith("-") else run_id


def _setting(name: str) -> str | None:
    value = os.environ.get(PREFIX + name)
    return value or None


def _plainly_configured() -> bool:
    """The settings read variables case-insensitively and parse empty ones; this path reads
    only upper-case, non-empty ones, so it steps aside when any other kind is set."""
    return all(
        key.startswith(PREFIX) and value
        for key, value in os.environ.items()
        if key.upper().startswith(PREFIX)
    )


def _api_key() -> str | None:
    if (key := _setting("API_KEY")) is not None:
        return key
    project_root = Path(root) if (root := _setting("PROJECT_ROOT")) else None
    data_dir = Path(data) if (data := _setting("DATA_DIR")) else None
    state = state_locations.state_dir(data_dir, project_root or state_locations.find_project_root())
    try:
        return state_locations.operator_key_path(state).read_text().strip() or None
    except OSError:
        return None


def results_document(run_id: str) -> str | None:
    """The gateway's `run show` document of the run, or None for the full command."""
    if not _plainly_configured():
        return None
    url = (_setting("GATEWAY_URL") or state_locations.DEFAULT_GATEWAY_URL).rstrip("/")
    key = _api_key()
    if key is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.query or parts.fragment:
        return None
    import http.client

    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        authority = _setting("GATEWAY_CA")
        if authority is None:
            return None
        import ssl

        connection = http.client.HTTPSConnection(
            parts.netloc,
            timeout=TIMEOUT_SEC,
            context=ssl.create_default_context(cafile=authority),
        )
    else:
        connection = http.client.HTTPConnection(parts.netloc, timeout=TIMEOUT_SEC)
    try:
        connection.request(
            "GET",
            f"{parts.path}/v1/runs/{quote(run_id, safe='')}/results",
            headers={"authorization": f"Bearer {key}"},
        )
        response = connection.getresponse()
        if response.status != 200:
            return None
        text: str = response.read().decode()
        return text
    except (OSError, ValueError, http.client.HTTPException):
        # Refused, unreachable or malformed: the full command asks again and says why.
        return None
    finally:
        connection.close()


def answered(argv: list[str]) -> int | None:
    """The exit code after printing the run's document, or None for the full command."""
    run_id = requested_run(argv)
    document = results_document(run_id) if run_id is not None else None
    if document is None:
        return None
    sys.stdout.write(document)
    sys.stdout.flush()
    return EXIT_RUN_FAILED if json.loads(document).get("status") in STOPPED else 0
