"""Every request to the gateway acts as its API key's owner: a missing, malformed, wrong,
expired or revoked key is a 401 with one line; a role below what a route needs is a
403; the control database holds the key's HMAC, never the key; and a bad request
(over the body limit, or failing the schema) writes nothing."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import select

from synth_pipelines.contracts.operator_key import KeyRequest
from synth_pipelines.control.operator_keys import create_key
from synth_pipelines.control.schema import operator_keys
from tests.gateway_support import bearer, gateway


def refusal(response: httpx.Response, status: int, error_type: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == error_type, body
    message = body["error"]["message"]
    assert message and "\n" not in message
    return message


def test_a_key_acts_as_its_owner_and_every_bad_key_is_a_401(state):
    with gateway() as gw:
        alice = gw.key("alice", role="viewer")
        who = httpx.get(f"{gw.url}/v1/whoami", headers=bearer(alice))
        assert who.status_code == 200, who.text
        assert who.json()["owner"] == "alice" and who.json()["role"] == "viewer"
        # The same key as x-api-key, the proxy's header.
        assert httpx.get(f"{gw.url}/v1/whoami", headers={"x-api-key": alice}).status_code == 200

        assert "API key is required" in refusal(
            httpx.get(f"{gw.url}/v1/whoami"), 401, "authentication_error"
        )
        assert "malformed" in refusal(
            httpx.get(f"{gw.url}/v1/whoami", headers=bearer("hunter2")), 401, "authentication_error"
        )
        key_id = alice.split("_")[1]
        wrong = f"synth_{key_id}_{'x' * 43}"
        unknown = f"synth_{'0' * 16}_{alice.split('_', 2)[2]}"
        for presented in (wrong, unknown):
            # A wrong secret and an unknown id read the same: nothing says the id exists.
            assert (
                refusal(
                    httpx.get(f"{gw.url}/v1/whoami", headers=bearer(presented)),
                    401,
                    "authentication_error",
                )
                == "the API key is not valid"
            )

        expired = create_key(
            gw.engine,
            gw.key_secret,
            KeyRequest(owner="alice", org="lab", role="viewer", expires_in_sec=60),
            now=datetime.now(UTC) - timedelta(minutes=2),
        ).secret
        assert "expired" in refusal(
            httpx.get(f"{gw.url}/v1/whoami", headers=bearer(expired)), 401, "authentication_error"
        )


def test_a_revoked_key_is_refused_within_a_second(state):
    with gateway() as gw:
        admin, alice = gw.key("root", role="admin"), gw.key("alice")
        assert httpx.get(f"{gw.url}/v1/whoami", headers=bearer(alice)).status_code == 200
        key_id = alice.split("_")[1]
        revoked = httpx.delete(f"{gw.url}/v1/keys/{key_id}", headers=bearer(admin))
        assert revoked.status_code == 200 and revoked.json()["revoked_at"], revoked.text
        began = time.monotonic()
        message = refusal(
            httpx.get(f"{gw.url}/v1/whoami", headers=bearer(alice)), 401, "authentication_error"
        )
        assert time.monotonic() - began < 1.0
        assert f"API key {key_id} was revoked" in message
        missing = httpx.delete(f"{gw.url}/v1/keys/{'f' * 16}", headers=bearer(admin))
        refusal(missing, 404, "not_found_error")


def test_only_an_admin_manages_keys(state):
    with gateway() as gw:
        for role in ("viewer", "operator"):
            key = gw.key("alice", role=role)
            listed = httpx.get(f"{gw.url}/v1/keys", headers=bearer(key))
            assert f"key {key.split('_')[1]} is a {role}'s" in refusal(
                listed, 403, "permission_error"
            )
            made = httpx.post(
                f"{gw.url}/v1/keys",
                headers=bearer(key),
                json={"owner": "alice", "org": "lab", "role": "admin"},
            )
            refusal(made, 403, "permission_error")
        admin = gw.key("root", role="admin", org="ops")
        made = httpx.post(
            f"{gw.url}/v1/keys",
            headers=bearer(admin),
            json={"owner": "bob", "org": "lab", "role": "viewer", "expires_in_sec": 3600},
        )
        assert made.status_code == 201, made.text
        bob = made.json()["secret"]
        assert httpx.get(f"{gw.url}/v1/whoami", headers=bearer(bob)).json()["owner"] == "bob"
        listed = httpx.get(f"{gw.url}/v1/keys", headers=bearer(admin), params={"owner": "bob"})
        assert [key["owner"] for key in listed.json()] == ["bob"]
        assert "secret" not in listed.text and bob.split("_", 2)[2] not in listed.text


def test_the_database_holds_a_keys_hmac_never_the_key(state):
    with gateway() as gw:
        alice = gw.key("alice")
        with gw.engine.connect() as conn:
            rows = [tuple(row) for row in conn.execute(select(operator_keys))]
        secret = alice.split("_", 2)[2]
        assert len(rows) == 1 and not any(secret in str(value) for value in rows[0])


def test_an_oversized_or_invalid_request_is_refused_and_writes_nothing(state):
    with gateway() as gw:
        admin = gw.key("root", role="admin")

        def keys() -> int:
            with gw.engine.connect() as conn:
                return len(conn.execute(select(operator_keys.c.key_id)).all())

        before = keys()
        huge = {"owner": "alice", "org": "lab", "padding": "x" * (2 << 20)}
        assert "over the gateway's limit of 1048576 bytes" in refusal(
            httpx.post(f"{gw.url}/v1/keys", headers=bearer(admin), json=huge),
            413,
            "request_too_large",
        )

        def chunks():
            yield b'{"owner": "alice", "org": "lab", "padding": "'
            for _ in range(40):
                yield b"x" * 65536
            yield b'"}'

        # Streamed without a length, the body is refused at the chunk that crosses the limit.
        streamed = httpx.post(
            f"{gw.url}/v1/keys",
            headers={**bearer(admin), "content-type": "application/json"},
            content=chunks(),
        )
        refusal(streamed, 413, "request_too_large")
        invalid = httpx.post(
            f"{gw.url}/v1/keys",
            headers=bearer(admin),
            json={"owner": "alice", "org": "lab", "role": "root"},
        )
        assert refusal(invalid, 422, "invalid_request_error").startswith("body.role:")
        unnamed = httpx.post(f"{gw.url}/v1/keys", headers=bearer(admin), json={"org": "lab"})
        assert refusal(unnamed, 422, "invalid_request_error").startswith("body.owner:")
        assert keys() == before
