"""The Dagster UI and GraphQL API only through the gateway, only for admins' keys: a key in
the headers or a session a one-time link starts (`synth ui`); and a run launched through it
is the launching key's owner's, whatever owner the client wrote.

A real code server and webserver (under `/dagster`, on loopback) serve the module; each test
starts a real gateway in front of them."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from synth_pipelines.config import DAGSTER_UI_PATH, Settings
from synth_pipelines.contracts.dagster_tags import OWNER_TAG
from synth_pipelines.services.embedded import CODE_LOCATION
from tests.conftest import PROJECT_ROOT
from tests.dagster_services import SYNTH, dagster_services
from tests.gateway_support import bearer, gateway
from tests.module_state import module_state
from tests.production_services import free_port

VERSION = "query { version }"
LAUNCH = """
mutation Launch($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId tags { key value } } }
    ... on PythonError { message }
  }
}
"""
LAUNCH_INLINE = """
mutation {
  launchPipelineExecution(executionParams: {
    selector: {repositoryLocationName: "LOCATION", repositoryName: "__repository__",
               jobName: "launch_experiment"},
    runConfigData: "{}",
    executionMetadata: {tags: [{key: "OWNER_TAG", value: "bob"}]}
  }) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
  }
}
""".replace("LOCATION", CODE_LOCATION).replace("OWNER_TAG", OWNER_TAG)
RUN_TAGS = """
query Tags($runId: ID!) {
  runOrError(runId: $runId) { ... on Run { tags { key value } } }
}
"""


@pytest.fixture(scope="module")
def dagster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SYNTH_DAGSTER_URL", f"http://127.0.0.1:{free_port()}{DAGSTER_UI_PATH}")
        with module_state(tmp_path_factory.mktemp("dagster-ui")), dagster_services():
            yield Settings().dagster_url


def _graphql(url: str, query: str, variables: dict | None = None, **kwargs) -> httpx.Response:
    return httpx.post(
        f"{url}/dagster/graphql",
        json={"query": query, "variables": variables or {}},
        timeout=60,
        **kwargs,
    )


def test_only_an_admins_key_reaches_the_ui_and_graphql(dagster_url):
    with gateway(dagster_url=dagster_url) as gw:
        admin = gw.key("alice", role="admin")
        for path in ("/dagster/", "/dagster/runs", "/dagster/graphql"):
            assert httpx.get(f"{gw.url}{path}").status_code == 401, path
        assert _graphql(gw.url, VERSION).status_code == 401
        nowhere = httpx.get(f"{gw.url}/nowhere", headers=bearer(admin))
        for role in ("viewer", "operator"):
            key = gw.key("bob", role=role)
            for path in ("/dagster", "/dagster/", "/dagster/runs", "/dagster/graphql"):
                refused = httpx.get(f"{gw.url}{path}", headers=bearer(key))
                # Answered as a path that does not exist: nothing says the UI is there.
                assert refused.status_code == 404, (role, path, refused.text)
                assert refused.json()["error"] == {
                    "type": "not_found_error",
                    "message": nowhere.json()["error"]["message"].replace("/nowhere", path),
                }
            assert _graphql(gw.url, VERSION, headers={"x-api-key": key}).status_code == 404
        page = httpx.get(f"{gw.url}/dagster/runs", headers=bearer(admin))
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert f"{DAGSTER_UI_PATH}/" in page.text  # its links are under the gateway's path
        answered = _graphql(gw.url, VERSION, headers={"x-api-key": admin})
        assert answered.status_code == 200, answered.text
        assert answered.json()["data"]["version"]
        # Folded away by a client, `..` would leave the path checked here: refused.
        sneaky = httpx.get(f"{gw.url}/dagster/x/%2E%2E/graphql", headers=bearer(admin))
        assert sneaky.status_code == 404


def _login(url: str, key: str) -> dict:
    created = httpx.post(f"{url}/v1/ui-sessions", headers=bearer(key))
    assert created.status_code == 201, created.text
    return created.json()


def test_a_login_link_signs_in_once_until_it_expires_and_the_key_is_revoked(dagster_url):
    with gateway(dagster_url=dagster_url, ui_login_ttl_sec=2.0) as gw:
        admin, other_admin = gw.key("alice", role="admin"), gw.key("carol", role="admin")
        refused = httpx.post(f"{gw.url}/v1/ui-sessions", headers=bearer(gw.key("bob")))
        assert refused.status_code == 403
        login = _login(gw.url, admin)
        assert admin not in login["login_url"] and login["ui_url"] == f"{gw.url}/dagster/"
        with httpx.Client(timeout=60) as browser:
            signed_in = browser.get(login["login_url"])
            assert signed_in.status_code == 200, signed_in.text
            cookie = signed_in.headers["set-cookie"].lower()
            for attribute in ("httponly", "samesite=strict", "path=/dagster"):
                assert attribute in cookie, cookie
            assert "secure" not in cookie  # plain HTTP here; over HTTPS it is set
            assert browser.get(f"{gw.url}/dagster/runs").status_code == 200
            assert _graphql(gw.url, VERSION, cookies=browser.cookies).status_code == 200
            # Once only.
            assert httpx.get(login["login_url"]).status_code == 401
            # The UI's websocket is let in on the session too, and refused without it.
            socket_url = gw.url.replace("http", "ws") + "/dagster/graphql"
            session = "; ".join(f"{name}={value}" for name, value in browser.cookies.items())
            with connect(
                socket_url, subprotocols=["graphql-ws"], additional_headers={"cookie": session}
            ) as socket:
                socket.send(json.dumps({"type": "connection_init", "payload": {}}))
                assert json.loads(socket.recv(timeout=30))["type"] == "connection_ack"
            with pytest.raises(InvalidStatus):
                connect(socket_url, subprotocols=["graphql-ws"]).close()
            # Revoking the key ends the session at its next request.
            key_id = admin.split("_")[1]
            revoked = httpx.delete(f"{gw.url}/v1/keys/{key_id}", headers=bearer(other_admin))
            assert revoked.status_code == 200, revoked.text
            after = browser.get(f"{gw.url}/dagster/runs")
            assert after.status_code == 401 and "revoked" in after.json()["error"]["message"]
        late = _login(gw.url, other_admin)
        time.sleep(2.5)
        expired = httpx.get(late["login_url"])
        assert expired.status_code == 401 and "expired" in expired.json()["error"]["message"]


def test_a_run_launched_through_the_gateway_is_the_launching_keys_owners(dagster_url):
    with gateway(dagster_url=dagster_url) as gw:
        alice = gw.key("alice", role="admin")
        params = {
            "selector": {
                "repositoryLocationName": CODE_LOCATION,
                "repositoryName": "__repository__",
                "jobName": "launch_experiment",
            },
            "runConfigData": "{}",
            "executionMetadata": {
                "tags": [{"key": OWNER_TAG, "value": "bob"}, {"key": "note", "value": "kept"}]
            },
        }
        launched = _graphql(gw.url, LAUNCH, {"executionParams": params}, headers=bearer(alice))
        assert launched.status_code == 200, launched.text
        result = launched.json()["data"]["launchRun"]
        assert result["__typename"] == "LaunchRunSuccess", result
        inline = _graphql(gw.url, LAUNCH_INLINE, headers=bearer(alice)).json()
        assert inline["data"]["launchPipelineExecution"]["__typename"] == "LaunchRunSuccess"
        for run_id, expected_note in (
            (result["run"]["runId"], "kept"),
            (inline["data"]["launchPipelineExecution"]["run"]["runId"], None),
        ):
            found = _graphql(gw.url, RUN_TAGS, {"runId": run_id}, headers=bearer(alice))
            tags = {tag["key"]: tag["value"] for tag in found.json()["data"]["runOrError"]["tags"]}
            assert tags[OWNER_TAG] == "alice", tags
            assert tags.get("note") == expected_note


def test_synth_ui_prints_a_link_that_signs_a_browser_in(dagster_url):
    # The gateway of the module's state, with the local operator's admin key, as after
    # `synth up`.
    printed = subprocess.run(
        [*SYNTH, "ui", "--json"],
        cwd=PROJECT_ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert printed.returncode == 0, printed.stderr
    login = json.loads(printed.stdout)
    with httpx.Client(timeout=60) as browser:
        assert browser.get(login["login_url"]).status_code == 200
        page = browser.get(login["ui_url"])
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
