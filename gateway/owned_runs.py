"""The run a request names, if it is the key owner's: by a whole id or a unique prefix of
the owner's runs. Another owner's run is answered exactly as a run that does not exist
(404), so a refusal never tells whether it exists.

A route under `/v1/runs/{run_id}` takes the run as a dependency: `ViewedRun` for any key,
`SteeredRun` for a key that may steer runs. Each checks the key and its role first, so a
key without the role is refused (403) before the run is looked up.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Connection

from gateway.auth import allowed, key_on, presented_key
from gateway.state import GatewayState, State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.operator_key import Role
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.control.runs import AmbiguousRunIdError, RunNotFoundError, find_run


def owned(conn: Connection, text: str, owner: str) -> RunRecord:
    """The run `text` names, if `owner`'s; otherwise 404, the same for a run of another
    owner as for none."""
    try:
        run = find_run(conn, text, owner)
    except AmbiguousRunIdError as ambiguous:
        raise ApiError("invalid_request_error", str(ambiguous)) from None
    except RunNotFoundError:
        run = None
    if run is None or run.owner != owner:
        raise ApiError("not_found_error", f"no run {text!r} of yours; `synth run list` shows them")
    return run


# Plain functions: FastAPI runs them on its thread pool, so the lookups never block the
# event loop. Each checks the key itself rather than depending on `Viewer` or `Operator`:
# the key and the run are found in one hop to the pool, where two dependencies would take
# two (a poll of `/results` costs about a fifth less CPU).
def run_of_key(
    conn: Connection, run_id: str, presented: str | None, state: GatewayState, role: Role
) -> RunRecord:
    """The `{run_id}` run of the owner of the key `presented`, for a key of `role` or
    above, looked up on `conn`: a route that reads more in the same hop to the thread
    pool, on the same connection, calls it."""
    key = allowed(key_on(conn, presented, state), role)
    return owned(conn, run_id, key.owner)


def _viewed_run(run_id: str, request: Request, state: State) -> RunRecord:
    with state.engine.connect() as conn:
        return run_of_key(conn, run_id, presented_key(request), state, "viewer")


def _steered_run(run_id: str, request: Request, state: State) -> RunRecord:
    with state.engine.connect() as conn:
        return run_of_key(conn, run_id, presented_key(request), state, "operator")


ViewedRun = Annotated[RunRecord, Depends(_viewed_run)]
"""The `{run_id}` run of the key's owner."""
SteeredRun = Annotated[RunRecord, Depends(_steered_run)]
"""The `{run_id}` run of the key's owner, for a key that may steer it (an operator's)."""
