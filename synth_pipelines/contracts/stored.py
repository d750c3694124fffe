"""How a record reads what the control database stores: timestamps and JSON text.

Every record model reads its row straight from the database
(`Model.model_validate(row, from_attributes=True)`); the two conversions a row needs are
made here, once.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, PlainSerializer


def _utc(moment: datetime) -> datetime:
    # SQLite hands timestamps back without their zone; every one was written in UTC.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


StoredDateTime = Annotated[datetime, AfterValidator(_utc)]
"""A moment read from the control database, always aware (UTC)."""

UtcDateTime = Annotated[
    StoredDateTime, PlainSerializer(datetime.isoformat, return_type=str, when_used="json")
]
"""A stored moment whose JSON form is `datetime.isoformat()` (`...+00:00`), the form the
`--json` documents have always printed (pydantic's own would end in `Z`)."""


def _parsed(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


JsonText = BeforeValidator(_parsed)
"""A value the database keeps as JSON text (`spec_json`, `data_json`, `metrics_json`): the
text is parsed before the value is validated; a value given as itself is taken as it is."""
