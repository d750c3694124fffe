"""Running a pinned profile in an environment for one attempt: the path shared by
`synth agent run` and Harbor-managed trials.

It verifies the profile's digest, mints the attempt's scoped token, opens the sandbox's
single route to the proxy, asks the proxy for the bound model's limits, builds the launch
with `build_launch`, records it (with runtime values as placeholders, so launches can be
compared), and carries it out.

The token lives as long as the run may (its timeout, plus `TOKEN_GRACE_SEC` for the
proxy's clock), and is revoked as soon as the run ends, however it ends: a copy the
harness left behind (in its logs, in the trial's artifacts) is refused from then on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable
from urllib.parse import urlparse
from uuid import UUID

from harbor.environments.base import BaseEnvironment

from synth_pipelines.agents.bindings import RuntimeBindings
from synth_pipelines.agents.engines import engine_runtime
from synth_pipelines.agents.execute import LaunchResult, execute_launch
from synth_pipelines.agents.launch import Launch, build_launch
from synth_pipelines.agents.platform_access import PlatformAccess
from synth_pipelines.agents.proxy_model import ProxyModelError, proxy_model
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.scoped_token import AttemptScope, TokenClaims
from synth_pipelines.control.token_revocations import revoke_token

SANDBOX_PROXY_PORT = 8200
TOKEN_GRACE_SEC = 60
UNBOUNDED_RUN_TOKEN_SEC = 3600
"""A run without a timeout still gets a token that expires, should its revocation never come
(the controlling process killed outright)."""


class ModelUnavailableError(RuntimeError):
    pass


@runtime_checkable
class RoutedEnvironment(Protocol):
    """An environment that opens its own route to a host address (the bwrap sandbox):
    a Unix socket, or a host and port."""

    async def open_route(self, inside_port: int, target: Path | tuple[str, int]) -> str: ...


class AttemptIdentity(AttemptScope):
    """An attempt as its session knows it: the scope its token grants, and its task."""

    task_name: str

    def in_trial(self, context_id: UUID | None) -> AttemptIdentity:
        """The attempt in one execution of it: Harbor's id of that trial, if it gave one."""
        return self.model_copy(update={"trial_id": str(context_id) if context_id else None})


@dataclass(frozen=True)
class LaunchOutcome:
    launch: Launch
    template: Launch
    result: LaunchResult


def token_lifetime(timeout_sec: float | None) -> int:
    """How long an attempt's token may live: its run's timeout and a small margin."""
    return int(timeout_sec or UNBOUNDED_RUN_TOKEN_SEC) + TOKEN_GRACE_SEC


def mint_attempt_token(
    identity: AttemptIdentity, ttl_sec: int, signing_key_path: Path
) -> tuple[str, TokenClaims]:
    """The attempt's token, signed with the key at `signing_key_path`, and its claims
    (whose `token_id` revocation names)."""
    from synth_pipelines.credentials import load_signing_key, new_claims, sign_claims

    claims = new_claims(identity, ttl_sec=ttl_sec)
    return sign_claims(load_signing_key(signing_key_path), claims), claims


@dataclass(frozen=True)
class AttemptToken:
    """An attempt's token, and how it is refused once the attempt has ended."""

    value: str
    revoke: Callable[[str], None]
    """Refuse the token from now on, saying why."""


def signed_token(identity: AttemptIdentity, ttl_sec: int, platform: PlatformAccess) -> AttemptToken:
    """A token signed with the platform's key and revoked in its control database: a
    managed trial's, whose worker holds both."""
    token, claims = mint_attempt_token(identity, ttl_sec, platform.signing_key_path)
    return AttemptToken(
        token, lambda reason: revoke_token(platform.control_engine(), claims, reason)
    )


def model_limits(proxy_url: str, token: str, model: str) -> tuple[int, int]:
    """(context window, output limit) of the bound model, as the proxy serves it."""
    try:
        entry = proxy_model(proxy_url, token, model, timeout_sec=30)
    except ProxyModelError as error:
        remedy = "; start it with `synth up` or `synth proxy serve`" if error.status is None else ""
        raise ModelUnavailableError(f"{error}{remedy}") from None
    return entry.max_input_tokens, entry.max_tokens


async def _route(environment: BaseEnvironment, platform: PlatformAccess) -> str:
    """The proxy's address as seen from inside the environment: a local sandbox gets a
    route to the proxy's listener for sandboxes (which serves only the model routes)
    when the proxy runs on this host, else to its URL."""
    proxy_url = platform.proxy_url
    if not isinstance(environment, RoutedEnvironment):
        return proxy_url
    sandboxes = platform.proxy_sandbox_socket
    if sandboxes.is_socket():
        return await environment.open_route(SANDBOX_PROXY_PORT, sandboxes)
    address = urlparse(proxy_url)
    # A URL without a host is this machine's (where asyncio connects when given none).
    host = address.hostname or "localhost"
    return await environment.open_route(SANDBOX_PROXY_PORT, (host, address.port or 80))


async def run_profile(
    environment: BaseEnvironment,
    pinned: PinnedProfile,
    instruction: str,
    identity: AttemptIdentity,
    logs_dir: Path,
    platform: PlatformAccess,
    *,
    timeout_sec: float | None,
    log_dir: str = "/logs/agent",
    token: AttemptToken | None = None,
) -> LaunchOutcome:
    """`token` is the attempt's own when its caller was given one (`synth agent run`'s, by
    the gateway); otherwise one is signed with the platform's key. Either is revoked when
    the run ends."""
    pinned.profile()  # refuses a profile whose digest does not match, before any token
    issued = token or signed_token(identity, token_lifetime(timeout_sec), platform)
    try:
        return await _run_with_token(
            environment,
            pinned,
            instruction,
            identity,
            logs_dir,
            platform,
            issued.value,
            timeout_sec,
            log_dir,
        )
    finally:
        # In a thread, so that a cancelled run (its timeout) still gets here and the
        # revocation completes even if this task is cancelled again while it waits.
        await asyncio.to_thread(issued.revoke, f"attempt {identity.attempt_id} has ended")


async def _run_with_token(
    environment: BaseEnvironment,
    pinned: PinnedProfile,
    instruction: str,
    identity: AttemptIdentity,
    logs_dir: Path,
    platform: PlatformAccess,
    token: str,
    timeout_sec: float | None,
    log_dir: str,
) -> LaunchOutcome:
    profile = pinned.profile()
    runtime = engine_runtime(profile.engine)
    context_window, max_output = await asyncio.to_thread(
        model_limits, platform.proxy_url, token, identity.model
    )
    workdir = ((await environment.exec("pwd")).stdout or "").strip() or "/"
    bindings = RuntimeBindings(
        task=identity.task_name,
        run=identity.run_id,
        attempt=identity.attempt_id,
        batch=identity.batch or "",
        model=identity.model,
        proxy_url=await _route(environment, platform),
        token=token,
        context_window=str(context_window),
        max_output_tokens=str(max_output),
        log_dir=log_dir,
    )
    launch = build_launch(profile, bindings, instruction, workdir, runtime)
    template = build_launch(
        profile, RuntimeBindings.placeholders(log_dir), instruction, workdir, runtime
    )
    logs_dir.mkdir(parents=True, exist_ok=True)
    (logs_dir / "launch.json").write_text(
        json.dumps(
            {"profile": pinned.digest, "launch": template.record(), "digest": template.digest()},
            indent=2,
        )
    )
    result = await execute_launch(environment, launch, timeout_sec=timeout_sec)
    return LaunchOutcome(launch, template, result)
