"""Scoped tokens: unknown or expired -> 401, another model -> 403, no provider key exposed."""

import base64
import hashlib
import hmac
import json
import time
import uuid

import anthropic
import httpx
import pytest

from synth_pipelines.agents.session import AttemptIdentity
from synth_pipelines.contracts.sampling_limits import SamplingLimits
from synth_pipelines.contracts.scoped_token import AttemptScope
from synth_pipelines.credentials import (
    TokenInvalidError,
    TokenScopeError,
    check_model,
    load_signing_key,
    mint_token,
    verify_token,
)
from tests.live_services import MODEL, capture_proxy, model_service, set_script

SCOPE = AttemptScope(run_id="r", attempt_id="a", owner="o", model=MODEL)


def test_token_round_trips_its_claims_and_rejects_forgery(tmp_path):
    key = load_signing_key(tmp_path / "key")
    token = mint_token(
        key, AttemptScope(run_id="r1", attempt_id="a1", owner="alice", model=MODEL), ttl_sec=60
    )
    claims = verify_token(key, token)
    assert (claims.run_id, claims.attempt_id, claims.owner, claims.model) == (
        "r1",
        "a1",
        "alice",
        MODEL,
    )
    body, signature = token.removeprefix("sk-synth-").split(".")
    forged = f"sk-synth-{body[:-2]}xx.{signature}"
    with pytest.raises(TokenInvalidError):
        verify_token(key, forged)
    with pytest.raises(TokenInvalidError, match="signature"):
        verify_token(load_signing_key(tmp_path / "other-key"), token)


def _claims_json(token: str) -> str:
    body = token.removeprefix("sk-synth-").split(".")[0]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


def test_a_new_token_carries_the_claims_tokens_always_carried(tmp_path):
    """The signed claims are a wire format: every field, in this order, nulls included."""
    key = load_signing_key(tmp_path / "key")
    before = int(time.time())
    claims = json.loads(_claims_json(mint_token(key, SCOPE, ttl_sec=60)))
    assert list(claims) == [
        "run_id",
        "attempt_id",
        "owner",
        "model",
        "role",
        "batch",
        "trial_id",
        "sampling_seed",
        "sampling_temperature",
        "expires_at",
        "token_id",
    ]
    assert {name: claims[name] for name in list(claims)[:9]} == {
        "run_id": "r",
        "attempt_id": "a",
        "owner": "o",
        "model": MODEL,
        "role": "actor",
        "batch": None,
        "trial_id": None,
        "sampling_seed": None,
        "sampling_temperature": None,
    }
    assert before + 60 <= claims["expires_at"] <= int(time.time()) + 60
    assert len(claims["token_id"]) == 32


def test_an_attempts_token_grants_its_scope_and_nothing_the_runtime_adds(tmp_path):
    key = load_signing_key(tmp_path / "key")
    identity = AttemptIdentity(
        run_id="r",
        attempt_id="a",
        owner="o",
        model=MODEL,
        role="judge",
        batch="r.b0000",
        sampling_seed=7,
        task_name="hello-world",
    ).in_trial(uuid.UUID(int=1))
    claims = json.loads(_claims_json(mint_token(key, identity, ttl_sec=60)))
    assert "task_name" not in claims
    assert (claims["role"], claims["batch"], claims["trial_id"], claims["sampling_seed"]) == (
        "judge",
        "r.b0000",
        str(uuid.UUID(int=1)),
        7,
    )
    assert AttemptIdentity.model_validate(identity.model_dump()).in_trial(None).trial_id is None


def test_a_token_carries_its_plans_sampling_limits_only_when_given(tmp_path):
    """An attempt's token carries its plan's limits to the proxy; a token without them is
    written as tokens always were (the wire format above), and read with the defaults."""
    key = load_signing_key(tmp_path / "key")
    limits = SamplingLimits(concurrent_calls=2, sampled_tokens_per_sec=10)
    limited = mint_token(key, SCOPE.model_copy(update={"sampling_limits": limits}), ttl_sec=60)
    assert json.loads(_claims_json(limited))["sampling_limits"] == {
        "concurrent_calls": 2,
        "sampled_tokens_per_sec": 10.0,
    }
    assert verify_token(key, limited).sampling_limits == limits
    plain = mint_token(key, SCOPE, ttl_sec=60)
    assert "sampling_limits" not in json.loads(_claims_json(plain))
    assert verify_token(key, plain).sampling_limits is None


def test_a_token_signed_before_still_verifies(tmp_path):
    """Claims written as tokens were always written (a signed body is never re-encoded)."""
    key = load_signing_key(tmp_path / "key")
    body = base64.urlsafe_b64encode(
        json.dumps(
            {
                "run_id": "r",
                "attempt_id": "a",
                "owner": "o",
                "model": MODEL,
                "role": "actor",
                "batch": None,
                "trial_id": None,
                "sampling_seed": 3,
                "sampling_temperature": 0.5,
                "expires_at": int(time.time()) + 60,
                "token_id": "t",
            },
            separators=(",", ":"),
        ).encode()
    ).rstrip(b"=")
    signature = base64.urlsafe_b64encode(hmac.new(key, body, hashlib.sha256).digest())
    claims = verify_token(key, f"sk-synth-{body.decode()}.{signature.rstrip(b'=').decode()}")
    assert (claims.run_id, claims.sampling_seed, claims.sampling_temperature, claims.token_id) == (
        "r",
        3,
        0.5,
        "t",
    )
    assert claims.batch is None and claims.trial_id is None


def test_expired_token_is_refused(tmp_path):
    key = load_signing_key(tmp_path / "key")
    token = mint_token(key, SCOPE, ttl_sec=1)
    with pytest.raises(TokenInvalidError, match="expired"):
        verify_token(key, token, now=time.time() + 5)


def test_token_for_one_model_cannot_sample_another(tmp_path):
    claims = verify_token(
        key := load_signing_key(tmp_path / "key"),
        mint_token(key, SCOPE, ttl_sec=60),
    )
    with pytest.raises(TokenScopeError, match="may sample only model"):
        check_model(claims, "deepseek-ai/DeepSeek-V3.1")


def test_signing_key_file_is_private(tmp_path):
    load_signing_key(tmp_path / "key")
    assert (tmp_path / "key").stat().st_mode & 0o077 == 0


@pytest.mark.slow
def test_proxy_answers_401_and_403_in_anthropics_error_shape(state):
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(model_url, [{"completion": "ok", "repeat": True}])
        body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        missing = httpx.post(f"{proxy.url}/v1/messages", json=body)
        forged = httpx.post(
            f"{proxy.url}/v1/messages", json=body, headers={"x-api-key": "sk-ant-xyz"}
        )
        expired_token = proxy.token(ttl=1)
        time.sleep(1.5)
        expired = httpx.post(
            f"{proxy.url}/v1/messages", json=body, headers={"x-api-key": expired_token}
        )
        other_model = httpx.post(
            f"{proxy.url}/v1/messages",
            json={**body, "model": "deepseek-ai/DeepSeek-V3.1"},
            headers={"x-api-key": proxy.token()},
        )
        operator = httpx.post(
            f"{proxy.url}/v1/messages",
            json=body,
            headers={"x-api-key": proxy.token(role="operator")},
        )
        bearer = anthropic.Anthropic(base_url=proxy.url, auth_token=proxy.token()).messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    for response in (missing, forged, expired):
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"
    assert "expired" in expired.json()["error"]["message"]
    for response in (other_model, operator):
        assert response.status_code == 403
        assert response.json()["error"]["type"] == "permission_error"
    assert bearer.content[0].text == "ok"
