"""Reading `@file` and inline JSON arguments into validated contracts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import Engine

from synth_pipelines.cli.output import UserError, describe_validation_error
from synth_pipelines.contracts.plan import Plan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.registry.profiles import ProfileError, get_profile


def read_json_argument(value: str, what: str) -> dict[str, Any]:
    """`@path/to/file.json` or an inline JSON object."""
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise UserError(f"{what} file {path} does not exist") from None
        except OSError as error:
            raise UserError(f"cannot read {what} file {path}: {error.strerror}") from None
        source = str(path)
    else:
        text, source = value, f"the {what} argument"
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(
            f"{source} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    if not isinstance(document, dict):
        raise UserError(f"{source} must hold a JSON object, not {type(document).__name__}")
    return document


def _explain(error: ValidationError, what: str, source: str) -> UserError:
    return UserError(f"{what} {source}: {describe_validation_error(error)}")


def read_plan(value: str) -> Plan:
    document = read_json_argument(value, "plan")
    try:
        return TypeAdapter(Plan).validate_python(document)
    except ValidationError as error:
        raise _explain(error, "plan", value) from None


def read_profile(engine: Engine, value: str, what: str = "profile") -> PinnedProfile:
    """`@file.json`, inline JSON, or a published `org/name@version`."""
    if not value.startswith("@") and not value.lstrip().startswith("{"):
        try:
            return get_profile(engine, value).pinned
        except ProfileError as error:
            raise UserError(f"{what}: {error}") from None
    document = read_json_argument(value, what)
    try:
        return PinnedProfile.from_document(document)
    except ValidationError as error:
        raise _explain(error, what, value) from None
