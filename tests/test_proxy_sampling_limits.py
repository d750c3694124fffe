"""One attempt's token cannot take the sampling every other attempt shares.

Before, per-token limits bounded prompt sizes and preparations, not sampling: one token's
16 concurrent calls filled the model's sampling batches, and an independent caller's
one-token call took 6-14 s instead of 0.04 s. Now each token holds at most its plan's
`concurrent_calls` calls in flight and samples at most its `sampled_tokens_per_sec` on
average; past either the proxy answers 429 `rate_limit_error` with `retry-after`, in
Anthropic's shape, at once."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from pydantic import TypeAdapter, ValidationError

from proxy.sampling_limits import BUCKET_SEC, SamplingBudget
from synth_pipelines.agents.platform_access import PlatformAccess
from synth_pipelines.agents.session import AttemptIdentity, mint_attempt_token
from synth_pipelines.contracts.dataset import TaskRef
from synth_pipelines.contracts.plan import Plan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.sampling_limits import SamplingLimits
from synth_pipelines.runtime.harbor_trials import Actor, AttemptContext, agent_config
from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET
from tests.live_services import MODEL, capture_proxy, model_service, set_script

pytestmark = pytest.mark.slow

FLOOD = 16
PLACES = SamplingLimits().concurrent_calls
FLOODER_TEMPERATURE = 0.7
"""The flooding token's calls sample at this (its claims set it), which is how the model
service below tells them from the other caller's."""


def held_flood(release: threading.Event, entered: list[float]):
    """A model service that holds the flooding token's samples until the test releases
    them, as a long generation holds a sampling batch."""

    def hook(app) -> None:
        @app.middleware("http")
        async def hold(request, call_next):
            if request.url.path.endswith("/asample"):
                params = json.loads(await request.body()).get("sampling_params") or {}
                if params.get("temperature") == FLOODER_TEMPERATURE:
                    entered.append(time.monotonic())
                    await asyncio.to_thread(release.wait, 60)
            return await call_next(request)

    return hook


def call(
    proxy_url: str, token: str, *, stream: bool = False, timeout: float = 60
) -> tuple[int | None, dict, float]:
    """Status (None: no answer within `timeout`), the error body and headers, seconds."""
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    }
    started = time.monotonic()
    try:
        response = httpx.post(
            f"{proxy_url}/v1/messages", json=body, headers={"x-api-key": token}, timeout=timeout
        )
    except httpx.TimeoutException:
        return None, {}, time.monotonic() - started
    took = time.monotonic() - started
    if response.status_code != 200:
        return response.status_code, {**response.headers, **response.json()}, took
    if stream:
        assert "event: message_stop" in response.text, response.text
        usage = {}
        for line in response.text.splitlines():
            if line.startswith("data: ") and '"message_delta"' in line:
                usage = json.loads(line.removeprefix("data: "))["usage"]
        return 200, {"usage": usage}, took
    return 200, response.json(), took


def test_calls_past_a_tokens_limit_are_refused_while_another_token_is_served(state):
    """16 concurrent calls from one token held to the default 8, on a proxy that samples 16
    calls at a time (its `generation_limit`): before, the 16 took every place and the
    other token's call waited for them; now 8 are refused at once and it is answered."""
    release, entered = threading.Event(), []
    with (
        model_service(app_hook=held_flood(release, entered)) as model_url,
        capture_proxy(model_url, generation_limit=FLOOD) as proxy,
    ):
        set_script(model_url, [{"completion": "ok", "repeat": True}])
        flooder = proxy.token(attempt="a-flood", sampling_temperature=FLOODER_TEMPERATURE)
        other = proxy.token(attempt="a-other")
        with ThreadPoolExecutor(FLOOD) as pool:
            try:
                flood = [
                    pool.submit(call, proxy.url, flooder, stream=n % 2 == 0) for n in range(FLOOD)
                ]
                deadline = time.monotonic() + 30
                # Every call of the flood has been held by the model or answered.
                while (
                    time.monotonic() < deadline
                    and len(entered) + sum(f.done() for f in flood) < FLOOD
                ):
                    time.sleep(0.05)
                time.sleep(0.5)
                held = len(entered)
                other_status, _, other_took = call(proxy.url, other, timeout=10)
            finally:
                release.set()
            answers = [f.result() for f in flood]
        # The places come back once their calls (streamed ones included) are answered.
        with ThreadPoolExecutor(PLACES) as pool:
            calls = [pool.submit(call, proxy.url, flooder, stream=n < 2) for n in range(PLACES)]
            again = [answer.result() for answer in calls]

    assert other_status == 200, f"the other token's call got {other_status} in {other_took:.1f} s"
    assert other_took < 5, other_took
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [200] * PLACES + [429] * (FLOOD - PLACES), statuses
    assert held == PLACES
    for status, refusal, took in answers:
        if status == 429:
            assert refusal["type"] == "error"
            assert refusal["error"]["type"] == "rate_limit_error"
            expected = f"{PLACES} sampling calls in flight, its limit is {PLACES}"
            assert expected in refusal["error"]["message"]
            assert int(refusal["retry-after"]) >= 1
            assert took < 5
    assert [status for status, _, _ in again] == [200] * PLACES


def test_a_token_past_its_sampled_tokens_per_second_waits_as_retry_after_says(state):
    """At 1 token/s the bucket holds 60 tokens: two answers of 40 tokens overdraw it (a
    streamed one is charged as a whole one is), the third call is refused with the wait
    that repays the overdraft, and another token is still served."""
    completion = " ".join(["word"] * 39)
    limits = SamplingLimits(sampled_tokens_per_sec=1)
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(model_url, [{"completion": completion, "repeat": True}])
        token = proxy.token(attempt="a-rate", sampling_limits=limits)
        first = call(proxy.url, token)
        second = call(proxy.url, token, stream=True)
        refused = call(proxy.url, token)
        other = call(proxy.url, proxy.token(attempt="a-other"))

    assert first[0] == 200 and second[0] == 200, (first, second)
    sampled = first[1]["usage"]["output_tokens"] + second[1]["usage"]["output_tokens"]
    overdraft = sampled - BUCKET_SEC * limits.sampled_tokens_per_sec
    assert overdraft > 0, sampled
    status, refusal, took = refused
    assert status == 429, refused
    assert refusal["type"] == "error" and refusal["error"]["type"] == "rate_limit_error"
    assert "sampling_limits.sampled_tokens_per_sec" in refusal["error"]["message"]
    # What the overdraft takes to repay at 1 token/s, less what was repaid meanwhile.
    assert overdraft - 10 <= int(refusal["retry-after"]) <= overdraft + 1, refusal
    assert took < 2
    assert other[0] == 200


def test_a_call_whose_client_left_is_charged_its_max_tokens():
    """The model service may sample a call to its end after its client has gone, and the
    proxy cannot tell how far: such a call costs its whole max_tokens."""

    async def scenario() -> tuple[float, float, int]:
        budget = SamplingBudget(SamplingLimits(sampled_tokens_per_sec=10))
        turn = budget.admit()
        turn.max_tokens = 500
        sampling = asyncio.ensure_future(turn.sampled(lambda: asyncio.Event().wait()))
        await asyncio.sleep(0.01)
        sampling.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sampling
        turn.release()
        return budget.capacity, budget.level, budget.in_flight

    capacity, level, in_flight = asyncio.run(scenario())
    assert capacity - 500 <= level <= capacity - 499
    assert in_flight == 0


@pytest.mark.parametrize(
    "limits",
    [
        {"concurrent_calls": 0},
        {"sampled_tokens_per_sec": 0},
        {"sampled_tokens_per_sec": -5},
        {"sampled_tokens_per_sec": "inf"},
        {"concurrent_calls": 2, "tokens_per_sec": 10},
    ],
)
def test_a_plan_refuses_sampling_limits_that_are_not_positive_or_not_known(limits):
    with pytest.raises(ValidationError, match="sampling_limits"):
        TypeAdapter(Plan).validate_python({"kind": "eval", "sampling_limits": limits})


def test_an_attempts_token_carries_its_plans_sampling_limits(tmp_path):
    """The runtime mints each attempt's token from the identity its agent is configured
    with; the plan's limits travel in it, as its seed and temperature do."""
    plan = TypeAdapter(Plan).validate_python(
        {
            "kind": "eval",
            "sampling_limits": {"concurrent_calls": 3, "sampled_tokens_per_sec": 50},
            "timeouts": {"agent_sec": 60},
        }
    )
    profile = json.loads((PROJECT_ROOT / "profiles" / "claude-code.json").read_text())
    task = TaskRef(
        position=0,
        name="add-default-argument",
        digest="sha256:" + "0" * 64,
        package_key="tasks/add-default-argument",
        package_sha256="0" * 64,
    )
    attempt = AttemptContext(
        run_id="r",
        batch="r.b0000",
        attempt_id="r.a0",
        group_index=0,
        attempt_index=0,
        task=task,
        task_dir=SAMPLE_DATASET / "add-default-argument",
        owner="o",
    )
    platform = PlatformAccess(
        proxy_url="http://127.0.0.1:1",
        proxy_sandbox_socket=tmp_path / "proxy.sock",
        signing_key_path=tmp_path / "key",
        owner="o",
        control_database_url="sqlite://",
    )
    config = agent_config(
        Actor.of(PinnedProfile.from_document(profile), MODEL), attempt, plan, platform
    )
    _, claims = mint_attempt_token(
        AttemptIdentity.model_validate(config.kwargs["identity"]), 60, tmp_path / "key"
    )
    assert claims.sampling_limits == SamplingLimits(concurrent_calls=3, sampled_tokens_per_sec=50)
