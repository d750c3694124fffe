"""The gateway mints an operator's harness session (`synth claude`): a token for the key's
owner and one model that the proxy honours, with the model calls passed through the
gateway's `/anthropic` to the proxy; asking for a model the owner may not sample
is a 404 like a model that does not exist; a session is revoked by its owner, or with
the key that minted it, and the proxy refuses it from then on."""

from __future__ import annotations

import time

import httpx

from tests.gateway_support import bearer, gateway
from tests.live_services import MODEL, platform, set_script


def sample(proxy_url: str, token: str) -> httpx.Response:
    return httpx.post(
        f"{proxy_url}/v1/messages",
        headers={"x-api-key": token, "anthropic-version": "2023-06-01"},
        json={"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        timeout=120,
    )


def refused_soon(proxy_url: str, token: str) -> float:
    """Seconds until the proxy refuses `token` (it reads revocations as they are recorded)."""
    began = time.monotonic()
    while sample(proxy_url, token).status_code != 401:
        assert time.monotonic() - began < 10, "the proxy still honours the token"
        time.sleep(0.05)
    return time.monotonic() - began


def test_a_session_samples_as_its_owner_until_revoked(state, monkeypatch):
    with platform(monkeypatch) as (model_url, proxy), gateway(proxy.url) as gw:
        set_script(model_url, [{"completion": "hello", "repeat": True}])
        alice = gw.key("alice")
        made = httpx.post(f"{gw.url}/v1/sessions", headers=bearer(alice), json={"model": MODEL})
        assert made.status_code == 201, made.text
        session = made.json()
        # The harness's model calls go to the gateway, which passes them to the proxy.
        assert session["proxy_url"] == f"{gw.url}/anthropic" and session["context_window"] > 0
        through = sample(session["proxy_url"], session["token"])
        assert through.status_code == 200 and through.json()["content"][0]["text"] == "hello"
        assert sample(proxy.url, session["token"]).status_code == 200
        # The gateway adds nothing of its own: without the token the proxy refuses.
        assert sample(session["proxy_url"], "not-a-token").status_code == 401

        # Bob cannot revoke it, and learns nothing of it.
        bob = gw.key("bob")
        other = httpx.delete(f"{gw.url}/v1/sessions/{session['token_id']}", headers=bearer(bob))
        assert other.status_code == 404
        assert sample(proxy.url, session["token"]).status_code == 200

        gone = httpx.delete(f"{gw.url}/v1/sessions/{session['token_id']}", headers=bearer(alice))
        assert gone.status_code == 204
        assert refused_soon(proxy.url, session["token"]) < 1.0
        assert sample(session["proxy_url"], session["token"]).status_code == 401


def test_revoking_a_key_revokes_the_sessions_it_minted(state, monkeypatch):
    with platform(monkeypatch) as (model_url, proxy), gateway(proxy.url) as gw:
        set_script(model_url, [{"completion": "hello", "repeat": True}])
        admin, alice = gw.key("root", role="admin"), gw.key("alice")
        tokens = [
            httpx.post(
                f"{gw.url}/v1/sessions", headers=bearer(alice), json={"model": MODEL}
            ).json()["token"]
            for _ in range(2)
        ]
        key_id = alice.split("_")[1]
        assert httpx.delete(f"{gw.url}/v1/keys/{key_id}", headers=bearer(admin)).is_success
        for token in tokens:
            assert refused_soon(proxy.url, token) < 1.0


def test_a_model_the_owner_may_not_sample_is_a_404_and_a_viewer_mints_nothing(state, monkeypatch):
    with platform(monkeypatch) as (_model_url, proxy), gateway(proxy.url) as gw:
        alice = gw.key("alice")
        for model in ("tinker://no-such-checkpoint/sampler_weights/0", "no/such-model"):
            missing = httpx.post(
                f"{gw.url}/v1/sessions", headers=bearer(alice), json={"model": model}
            )
            assert missing.status_code == 404, missing.text
            assert f"no model {model!r} you may sample" in missing.json()["error"]["message"]
        viewer = httpx.post(
            f"{gw.url}/v1/sessions", headers=bearer(gw.key("carol", role="viewer")),
            json={"model": MODEL},
        )  # fmt: skip
        assert viewer.status_code == 403
