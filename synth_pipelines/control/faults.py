"""Model calls the platform failed: what the capture proxy refused or could not serve.

The proxy records a fault for every call of an identified attempt that failed on the
platform's side (token refused, model not served, backend error, overload), before its
error response goes out. When the attempt's harness ends, the runtime reads them: an agent
that stopped because its model route failed has not been assessed, whatever its verifier
then writes. One row per attempt and role holds the count and the latest fault, so a
harness that retries in a loop cannot grow the table.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine, select
from sqlalchemy.dialects import postgresql, sqlite

from synth_pipelines.contracts.model_call_fault import ModelCallFault
from synth_pipelines.control.schema import model_call_faults

MESSAGE_LIMIT = 2000


def record_fault(
    engine: Engine,
    *,
    run_id: str,
    attempt_id: str,
    role: str,
    status: int,
    error_type: str,
    message: str,
) -> None:
    now = datetime.now(UTC)
    values = {
        "run_id": run_id,
        "attempt_id": attempt_id,
        "role": role,
        "faults": 1,
        "status": status,
        "error_type": error_type,
        "message": message[:MESSAGE_LIMIT],
        "first_at": now,
        "last_at": now,
    }
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(model_call_faults).values(**values)
    statement = statement.on_conflict_do_update(
        index_elements=["run_id", "attempt_id", "role"],
        set_={
            "faults": model_call_faults.c.faults + 1,
            "status": status,
            "error_type": error_type,
            "message": values["message"],
            "last_at": now,
        },
    )
    with engine.begin() as conn:
        conn.execute(statement)


def attempt_fault(engine: Engine, run_id: str, attempt_id: str, role: str) -> ModelCallFault | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(model_call_faults).where(
                model_call_faults.c.run_id == run_id,
                model_call_faults.c.attempt_id == attempt_id,
                model_call_faults.c.role == role,
            )
        ).first()
    return ModelCallFault.model_validate(row, from_attributes=True) if row else None
