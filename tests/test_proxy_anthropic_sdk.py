"""The official `anthropic` SDK works against the proxy: create, stream, count_tokens, models."""

import json

import anthropic
import httpx
import pytest

from tests.live_services import MODEL, capture_proxy, model_service, set_script

TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.mark.slow
def test_anthropic_sdk_create_stream_count_and_models(state):
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(
            model_url,
            [
                {"match": "<tool_response>", "completion": "It is sunny in Paris."},
                {"completion": TOOL_CALL},
                {"completion": "Hi! How can I help?", "repeat": True},
            ],
        )
        client = anthropic.Anthropic(base_url=proxy.url, api_key=proxy.token())
        asked = [{"role": "user", "content": "Weather in Paris?"}]
        first = client.messages.create(
            model=MODEL,
            max_tokens=256,
            tools=TOOLS,
            messages=asked,
            thinking={"type": "disabled"},
        )
        assert first.stop_reason == "tool_use"
        (call,) = [b for b in first.content if b.type == "tool_use"]
        assert (call.name, call.input) == ("get_weather", {"city": "Paris"})
        assert call.id.startswith("toolu_")
        followed = [
            *asked,
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21C"}
                ],
            },
        ]
        with client.messages.stream(
            model=MODEL,
            max_tokens=256,
            tools=TOOLS,
            messages=followed,
            thinking={"type": "disabled"},
        ) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_message()
        assert final.content[-1].text == "It is sunny in Paris."
        assert final.stop_reason == "end_turn"
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        counted = client.messages.count_tokens(model=MODEL, messages=followed, tools=TOOLS)
        assert counted.input_tokens == final.usage.input_tokens
        models = client.models.list()
        assert MODEL in [m.id for m in models.data]
        plain = client.messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )
        assert plain.content[-1].text == "Hi! How can I help?"


@pytest.mark.slow
def test_bad_requests_get_400_in_anthropics_error_shape_and_the_proxy_keeps_serving(state):
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(model_url, [{"completion": "still here", "repeat": True}])
        headers = {"x-api-key": proxy.token(), "content-type": "application/json"}
        url = f"{proxy.url}/v1/messages"

        def body(**fields) -> bytes:
            return json.dumps({"model": MODEL, "max_tokens": 5, **fields}).encode()

        user = [{"role": "user", "content": "x"}]
        orphan = [
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "y"}],
            }
        ]
        cases = {
            "not json": b"{nope",
            "wrong type": body(max_tokens="many", messages=user),
            "unknown field": body(messages=user, frobnicate=1),
            "orphan tool_result": body(messages=orphan),
            "invalid utf-8": body(messages=user).replace(b'"x"', b'"\xff\xfe"'),
        }
        for name, body in cases.items():
            response = httpx.post(url, content=body, headers=headers)
            assert response.status_code == 400, (name, response.text)
            error = response.json()
            assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error", (
                name
            )
        unknown = httpx.post(
            url,
            json={"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
            headers=headers,
        )
        assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"
        ok = anthropic.Anthropic(base_url=proxy.url, api_key=proxy.token()).messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
        assert ok.content[-1].text == "still here"
