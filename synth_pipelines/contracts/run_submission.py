"""What an operator sends to start a run: the body of the gateway's `POST /v1/runs`.

Profiles and the plan travel as the documents themselves: the gateway never reads a file
a client names (it could only be one of the gateway's own). A profile may instead be a
published `org/name@version`. The owner is the API key's, never a field of the body.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def _published_name(value: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(value, str) and (value.startswith("@") or value.lstrip().startswith("{")):
        raise ValueError("a profile is a published org/name@version or its JSON document")
    return value


ProfileArgument = Annotated[str | dict[str, Any], AfterValidator(_published_name)]
"""A profile as a request carries it: a published `org/name@version`, or its document;
never a file name (`@file`), which the gateway could only read from its own disk."""


class RunSubmission(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(description="Dataset version, org/name@version.")
    actor: ProfileArgument = Field(
        description="The actor profile: a published org/name@version, or its document."
    )
    plan: dict[str, Any] = Field(description="The plan document.")
    judge: ProfileArgument | None = Field(
        None, description="A judge profile in place of the tasks' verifiers (evaluations)."
    )
    model: str | None = Field(
        None, description="Bind the actor to this base model or checkpoint (tinker://...)."
    )
    idempotency_key: str | None = Field(
        None, description="Retrying with the same key returns the same run."
    )
    kinds: list[str] = Field(
        default_factory=list, description="The plan kinds the submitting command takes; empty: any."
    )
