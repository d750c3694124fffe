"""`synth admin key create|list|revoke` speak only to the gateway: with its URL and an
admin's key an operator manages keys from anywhere; a bad key or an unreachable gateway
is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.gateway_support import bearer, gateway
from tests.production_services import free_port

SYNTH = str(Path(sys.executable).parent / "synth")


def synth(url: str, key: str, *args: str) -> subprocess.CompletedProcess:
    # Nothing of the platform's own settings: only where the gateway is and the key.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SYNTH_", "DAGSTER_"))}
    env |= {"SYNTH_GATEWAY_URL": url, "SYNTH_API_KEY": key, "SYNTH_DATA_DIR": "/nonexistent"}
    return subprocess.run([SYNTH, *args], env=env, capture_output=True, text=True, timeout=120)


def test_an_admin_creates_lists_and_revokes_keys_through_the_gateway(state):
    with gateway() as gw:
        admin = gw.key("root", role="admin", org="ops")
        made = synth(
            gw.url, admin, "admin", "key", "create", "--owner", "alice", "--org", "lab",
            "--role", "viewer", "--expires", "30d", "--json",
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        created = json.loads(made.stdout)
        alice = created["secret"]
        assert created["key"]["owner"] == "alice" and created["key"]["expires_at"]
        assert httpx.get(f"{gw.url}/v1/whoami", headers=bearer(alice)).json()["role"] == "viewer"

        shown = synth(gw.url, admin, "admin", "key", "create", "--owner", "bob", "--org", "lab")
        assert shown.returncode == 0 and "shown only now" in shown.stdout, shown.stderr
        assert shown.stdout.strip().splitlines()[-1].startswith("synth_")

        listed = synth(gw.url, admin, "admin", "key", "list", "--owner", "alice", "--json")
        assert [key["key_id"] for key in json.loads(listed.stdout)] == [created["key"]["key_id"]]
        assert alice.split("_", 2)[2] not in listed.stdout

        revoked = synth(gw.url, admin, "admin", "key", "revoke", created["key"]["key_id"])
        assert revoked.returncode == 0 and "revoked API key" in revoked.stdout
        assert httpx.get(f"{gw.url}/v1/whoami", headers=bearer(alice)).status_code == 401

        # A viewer's key cannot, and says so in one line.
        refused = synth(gw.url, gw.key("carol", role="viewer"), "admin", "key", "list")
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
        assert "role admin" in refused.stderr


def test_a_bad_key_bad_input_or_no_gateway_is_one_line_and_exit_2(state):
    with gateway() as gw:
        admin = gw.key("root", role="admin")
        wrong = synth(gw.url, "synth_0000000000000000_nope", "admin", "key", "list", "--json")
        assert wrong.returncode == 2 and "not valid" in wrong.stderr
        assert json.loads(wrong.stdout) == {"error": "the API key is not valid", "exit_code": 2}
        bad = synth(gw.url, admin, "admin", "key", "create", "--owner", "a", "--org", "b",
                    "--expires", "soon")  # fmt: skip
        assert bad.returncode == 2 and "--expires 'soon'" in bad.stderr
        invalid = synth(gw.url, admin, "admin", "key", "create", "--owner", "a b", "--org", "b")
        assert invalid.returncode == 2 and "owner" in invalid.stderr
    gone = synth(f"http://127.0.0.1:{free_port()}", admin, "admin", "key", "list")
    assert gone.returncode == 2 and "cannot reach the gateway" in gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1
