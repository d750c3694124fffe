"""Sandboxes reach the proxy only on its listener for sandboxes, which serves the model
routes and nothing else; operators keep the metrics and the API documents on the
proxy's own address. Before, `/metrics`, `/openapi.json` and `/docs` answered through a
sandbox's route without a token, with platform-wide counters."""

from __future__ import annotations

import httpx
import pytest

from tests.live_services import MODEL, capture_proxy, model_service, set_script

pytestmark = pytest.mark.slow

OPERATOR_ONLY = ["/metrics", "/openapi.json", "/docs", "/redoc", "/health"]


def test_sandbox_listener_serves_the_model_routes_only(state):
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(model_url, [{"completion": "ok", "repeat": True}])
        transport = httpx.HTTPTransport(uds=str(proxy.sandbox_socket))
        headers = {"x-api-key": proxy.token()}
        count = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        body = {**count, "max_tokens": 8}
        with httpx.Client(transport=transport, base_url="http://sandbox") as sandbox:
            refused = {path: sandbox.get(path) for path in OPERATOR_ONLY}
            flush = sandbox.post("/internal/evidence/flush", json={}, headers=headers)
            message = sandbox.post("/v1/messages", json=body, headers=headers)
            counted = sandbox.post("/v1/messages/count_tokens", json=count, headers=headers)
            models = sandbox.get("/v1/models", headers=headers)
            model = sandbox.get(f"/v1/models/{MODEL}", headers=headers)
        operator = {path: httpx.get(f"{proxy.url}{path}") for path in OPERATOR_ONLY}
    for path, response in [*refused.items(), ("/internal/evidence/flush", flush)]:
        assert response.status_code == 404, path
        error = response.json()["error"]
        assert error["type"] == "not_found_error"
        assert "not served to sandboxes" in error["message"], path
    assert message.status_code == 200 and message.json()["content"][0]["text"] == "ok"
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
    assert models.status_code == 200 and model.status_code == 200
    assert {path: response.status_code for path, response in operator.items()} == dict.fromkeys(
        OPERATOR_ONLY, 200
    )
    assert "synth_proxy" in operator["/metrics"].text
