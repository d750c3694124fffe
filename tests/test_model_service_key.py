"""A model service given its key (`synth model serve` gives it `TINKER_API_KEY`) answers
only requests that carry it: whoever reaches its port without the deployment's key
samples nothing, trains nothing and scripts nothing, past the proxy's owner checks or
not. Only its health check is open."""

from __future__ import annotations

import httpx
import pytest
import tinker

from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.server import serving

KEY = "tml-deployment-secret"


@pytest.fixture
def service_url(tmp_path, monkeypatch):
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    app = create_app(QWEN3_TINY, scripted=True, object_store_url=f"file://{tmp_path}", api_key=KEY)
    with serving(app) as url:
        yield url


def test_only_the_services_own_key_is_answered(service_url):
    capabilities = f"{service_url}/api/v1/get_server_capabilities"
    for headers in ({}, {"X-API-Key": "tml-anything"}, {"X-API-Key": KEY + "x"}):
        refused = httpx.get(capabilities, headers=headers)
        assert refused.status_code == 401, (headers, refused.text)
        assert "TINKER_API_KEY" in refused.json()["error"]
        scripted = httpx.put(
            f"{service_url}/scripted/v1/script", json={"entries": []}, headers=headers
        )
        assert scripted.status_code == 401, headers
    assert httpx.get(capabilities, headers={"X-API-Key": KEY}).status_code == 200
    assert httpx.get(f"{service_url}/api/v1/healthz").status_code == 200
    # The tinker SDK with another key gets nowhere either.
    with pytest.raises(tinker.AuthenticationError):
        tinker.RestClient(
            base_url=service_url, api_key="tml-other"
        ).get_server_capabilities().result()
    served = tinker.RestClient(base_url=service_url, api_key=KEY).get_server_capabilities()
    assert QWEN3_TINY in {model.model_name for model in served.result().supported_models}
