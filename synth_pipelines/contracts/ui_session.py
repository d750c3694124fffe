"""A sign-in link to the Dagster UI through the gateway (`POST /v1/ui-sessions`, `synth ui`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from synth_pipelines.contracts.stored import UtcDateTime


class UiLogin(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    login_url: str = Field(
        description="Open it in a browser once, before it expires: it starts a UI session "
        "acting as the key that asked, and goes on to the Dagster UI."
    )
    ui_url: str = Field(description="The Dagster UI, for the browser signed in.")
    expires_at: UtcDateTime = Field(description="The link is refused from then on.")
