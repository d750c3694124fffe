"""Launch constraints: routing, capture and the model binding belong to the launcher.

A profile that would send the harness elsewhere, bind another model, or hand it a
provider credential is rejected before anything starts, naming the setting and why.
"""

from __future__ import annotations

import json

from synth_pipelines.agents.engines import EngineRuntime
from synth_pipelines.contracts.profile import Profile

SETTINGS_FILES = ("settings.json", "settings.local.json", "managed-settings.json")
SETTINGS_KEYS = ("model", "apiKeyHelper", "awsAuthRefresh", "awsCredentialExport")


class LaunchConstraintError(ValueError):
    pass


def _refuse(profile: Profile, what: str) -> LaunchConstraintError:
    return LaunchConstraintError(
        f"profile {profile.ref} {what}; routing to the capture proxy, the scoped token and "
        "the model binding are set by the launcher and cannot be changed by a profile"
    )


def check_launch_constraints(profile: Profile, runtime: EngineRuntime) -> None:
    if profile.engine_version is not None and profile.engine_version != runtime.version:
        raise LaunchConstraintError(
            f"profile {profile.ref} pins {profile.engine} {profile.engine_version}, but this "
            f"platform runs {profile.engine} {runtime.version}; publish a profile version that "
            f"pins {runtime.version} (or leaves engine_version unset)"
        )
    for binding in profile.env:
        if binding.name in runtime.forbidden_env:
            raise _refuse(profile, f"sets {binding.name}")
        if binding.name == runtime.output_limit_env and not (
            binding.value is not None and binding.value.isdecimal() and int(binding.value) > 0
        ):
            raise LaunchConstraintError(
                f"profile {profile.ref} sets {binding.name} to {binding.value or binding.bind!r}; "
                "it may only lower the model's output limit, so give a positive whole number"
            )
    for arg in profile.args:
        flag = arg.split("=", 1)[0]
        if flag in runtime.forbidden_args:
            raise _refuse(profile, f"passes {flag}")
    for supplied in profile.files:
        if supplied.path.rsplit("/", 1)[-1] in SETTINGS_FILES:
            _check_settings(profile, supplied.path, supplied.content, runtime)


def _check_settings(profile: Profile, path: str, content: str, runtime: EngineRuntime) -> None:
    try:
        document = json.loads(content)
    except json.JSONDecodeError as error:
        raise LaunchConstraintError(
            f"profile {profile.ref} supplies {path}, which is not valid JSON: {error.msg}"
        ) from None
    if not isinstance(document, dict):
        return
    for key in SETTINGS_KEYS:
        if key in document:
            raise _refuse(profile, f"sets {key!r} in {path}")
    env = document.get("env")
    if isinstance(env, dict):
        for name in env:
            if name in runtime.forbidden_env:
                raise _refuse(profile, f"sets {name} in {path}")
