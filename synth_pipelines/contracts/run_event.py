"""One event of a run's append-only log; its `seq` is the cursor readers resume after."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from synth_pipelines.contracts.stored import JsonText, UtcDateTime


class RunEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)

    seq: int
    run_id: str
    kind: str
    data: Annotated[dict[str, Any], JsonText] = Field(
        validation_alias=AliasChoices("data", "data_json")
    )
    created_at: UtcDateTime
