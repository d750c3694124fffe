"""Malformed Messages requests against the real proxy: each is a 4xx in Anthropic's error shape
with a message naming what was wrong, none is a 5xx, and the proxy keeps serving afterwards:
its health is checked after each test, and valid calls succeed after the lot."""

import json
import os
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlparse

import httpx
import pytest

from proxy.token_limits import Allowance
from synth_pipelines.control.database import engine_for
from synth_pipelines.rendering.model_registry import ModelRegistry
from tests.conftest import PROJECT_ROOT
from tests.live_services import MODEL, Proxy, platform, set_script

pytestmark = pytest.mark.slow

USER = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def tool_turns(use_ids: list[str], result_ids: list[str]) -> list[dict]:
    """A user turn, an assistant turn calling `read_file` once per id, and the results."""
    uses = [
        {"type": "tool_use", "id": id_, "name": "read_file", "input": {"path": "a"}}
        for id_ in use_ids
    ]
    results = [{"type": "tool_result", "tool_use_id": id_, "content": "x"} for id_ in result_ids]
    return [
        *USER,
        {"role": "assistant", "content": uses},
        {"role": "user", "content": results},
    ]


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """One platform for the module, in a state directory of its own (as `state` makes one)."""
    root = tmp_path_factory.mktemp("bad-input")
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((PROJECT_ROOT / "dagster_home/dagster.yaml").read_text())
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("SYNTH_DATA_DIR", str(root / "state"))
        monkeypatch.setenv("DAGSTER_HOME", str(home))
        monkeypatch.delenv("SYNTH_DATABASE_URL", raising=False)
        monkeypatch.delenv("SYNTH_OBJECT_STORE_URL", raising=False)
        engine_for.cache_clear()
        with platform(monkeypatch) as (model_url, proxy):
            set_script(model_url, [{"completion": "still serving", "repeat": True}])
            yield proxy
    engine_for.cache_clear()


@pytest.fixture(autouse=True)
def stays_healthy(proxy: Proxy) -> Iterator[None]:
    yield
    assert httpx.get(f"{proxy.url}/health").json()["status"] == "ok"


def assert_valid_calls_succeed(proxy: Proxy) -> None:
    body = {"model": MODEL, "max_tokens": 16, "messages": USER}
    plain = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=auth(proxy), timeout=60)
    assert plain.status_code == 200, plain.text
    assert plain.json()["content"][-1]["text"] == "still serving"
    streamed = httpx.post(
        f"{proxy.url}/v1/messages", json={**body, "stream": True}, headers=auth(proxy), timeout=60
    )
    assert streamed.status_code == 200 and "event: message_stop" in streamed.text


def auth(proxy: Proxy) -> dict[str, str]:
    return {"x-api-key": proxy.token()}


def post(
    proxy: Proxy, body: bytes | dict, *, path: str = "/v1/messages", **headers: str
) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"content-type": "application/json", **auth(proxy), **headers}
    return httpx.post(f"{proxy.url}{path}", content=content, headers=sent, timeout=60)


def assert_refused(response: httpx.Response, status: int, error_type: str, *fragments: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()
    assert error["type"] == "error", error
    assert error["error"]["type"] == error_type, error
    for fragment in fragments:
        assert fragment in error["error"]["message"], error["error"]["message"]


def request(stream: bool = False, **fields) -> dict:
    return {"model": MODEL, "max_tokens": 16, "messages": USER, "stream": stream, **fields}


WRONG_TYPES = {
    "model": 5,
    "messages": {"role": "user", "content": "hi"},
    "max_tokens": "16",
    "stream": "yes",
    "system": 5,
    "temperature": "hot",
    "top_p": [0.5],
    "top_k": "40",
    "stop_sequences": "STOP",
    "tools": {"name": "read_file"},
    "tool_choice": "auto",
    "thinking": True,
    "metadata": "user-1",
    "service_tier": 1,
    "speed": 2,
    "inference_geo": 3,
    "diagnostics": "on",
    "user_profile_id": 4,
    "workspace_id": 5,
    "context_management": "keep",
    "output_config": "json",
    "cache_control": "ephemeral",
}


@pytest.mark.parametrize("field", sorted(WRONG_TYPES))
def test_wrong_type_for_a_top_level_field_is_a_400_naming_the_field(proxy, field):
    response = post(proxy, request(**{field: WRONG_TYPES[field]}))
    assert_refused(response, 400, "invalid_request_error", field)


@pytest.mark.parametrize("field", ["model", "messages", "max_tokens"])
def test_missing_required_field_is_a_400_naming_it(proxy, field):
    body = request()
    del body[field]
    assert_refused(post(proxy, body), 400, "invalid_request_error", field, "Field required")


def test_invalid_json_is_a_400(proxy):
    assert_refused(post(proxy, b'{"model": '), 400, "invalid_request_error", "not valid JSON")


def test_empty_body_is_a_400(proxy):
    assert_refused(post(proxy, b""), 400, "invalid_request_error", "not valid JSON")


def test_json_that_is_not_an_object_is_a_400(proxy):
    response = post(proxy, b"[1, 2]")
    assert_refused(response, 400, "invalid_request_error", "must be a JSON object", "list")


def test_invalid_utf8_in_the_body_is_a_400(proxy):
    body = json.dumps(request()).encode().replace(b'"hi"', b'"\xff\xfe\xc3"')
    assert_refused(post(proxy, body), 400, "invalid_request_error", "not valid JSON")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_declared_json_is_a_400_naming_its_content_type(proxy, content_type):
    response = post(proxy, request(), **{"content-type": content_type})
    assert_refused(response, 400, "invalid_request_error", repr(content_type), "application/json")


def test_declared_huge_body_is_a_413_before_it_is_read(proxy):
    """50 MB declared, 1 kB sent: the answer comes without waiting for (or holding) the rest."""
    address = urlparse(proxy.url)
    head = (
        "POST /v1/messages HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n"
        f"x-api-key: {proxy.token()}\r\ncontent-length: {50 * 1024 * 1024}\r\n\r\n"
    )
    with socket.create_connection((address.hostname, address.port), timeout=30) as connection:
        connection.sendall(head.encode() + b"[" * 1024)
        answer = b""
        while b"}}" not in answer:
            chunk = connection.recv(65536)
            assert chunk, answer
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert b" 413 " in status_line, answer
    error = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert error["error"]["type"] == "request_too_large"
    assert "52428800 bytes" in error["error"]["message"]


def _rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_huge_chunked_body_is_a_413_and_memory_stays_bounded(proxy):
    """50 MB with no declared length (chunked): refused once it passes the limit, never whole."""
    chunk = 1024 * 1024
    sent = [0]

    def body() -> Iterator[bytes]:
        for _ in range(50):
            sent[0] += chunk
            yield b" " * chunk

    before = _rss_bytes()
    response = httpx.post(
        f"{proxy.url}/v1/messages",
        content=body(),
        headers={"content-type": "application/json", **auth(proxy)},
        timeout=60,
    )
    grown = _rss_bytes() - before
    limit = Allowance(MODEL, ModelRegistry().get(MODEL).context_window).body_bytes
    assert_refused(response, 413, "request_too_large", f"this token's limit of {limit} bytes")
    assert sent[0] == 50 * chunk
    # The server holds at most the limit: never the 50 MB body, nor a joined copy of it.
    assert grown < 50 * chunk, f"the server process grew by {grown} bytes"


@pytest.mark.parametrize("stream", [False, True])
def test_empty_messages_is_a_400(proxy, stream):
    response = post(proxy, request(stream, messages=[]))
    assert_refused(response, 400, "invalid_request_error", "at least one message")


@pytest.mark.parametrize("stream", [False, True])
def test_conversation_ending_with_an_assistant_turn_is_a_400(proxy, stream):
    messages = [*USER, {"role": "assistant", "content": "Sure,"}]
    response = post(proxy, request(stream, messages=messages))
    assert_refused(response, 400, "invalid_request_error", "prefill")


@pytest.mark.parametrize("stream", [False, True])
def test_tool_result_for_an_unknown_tool_use_id_is_a_400_naming_the_id(proxy, stream):
    messages = tool_turns(["toolu_known"], ["toolu_unknown"])
    response = post(proxy, request(stream, messages=messages, tools=TOOLS))
    assert_refused(response, 400, "invalid_request_error", "'toolu_unknown'")


@pytest.mark.parametrize("stream", [False, True])
def test_tool_result_without_any_tool_use_is_a_400(proxy, stream):
    messages = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
    ]
    response = post(proxy, request(stream, messages=messages, tools=TOOLS))
    assert_refused(response, 400, "invalid_request_error", "'toolu_1'")


@pytest.mark.parametrize("stream", [False, True])
def test_duplicated_tool_use_ids_are_a_400(proxy, stream):
    messages = tool_turns(["toolu_same", "toolu_same"], ["toolu_same"])
    response = post(proxy, request(stream, messages=messages, tools=TOOLS))
    assert_refused(response, 400, "invalid_request_error", "'toolu_same' is used twice")


@pytest.mark.parametrize("max_tokens", [0, -1])
@pytest.mark.parametrize("stream", [False, True])
def test_max_tokens_below_one_is_a_400(proxy, max_tokens, stream):
    response = post(proxy, request(stream, max_tokens=max_tokens))
    assert_refused(response, 400, "invalid_request_error", "max_tokens", str(max_tokens))


@pytest.mark.parametrize("max_tokens", [100_000, 10**30])
def test_max_tokens_over_the_model_limit_is_capped_not_failed(proxy, max_tokens):
    """Harnesses send their own default (Claude Code: 32000); the model's output limit caps it,
    as `GET /v1/models/{id}` documents."""
    response = post(proxy, request(max_tokens=max_tokens))
    assert response.status_code == 200, response.text
    assert response.json()["content"][-1]["text"] == "still serving"


@pytest.mark.parametrize("stream", [False, True])
def test_unknown_model_is_a_404_listing_the_served_models(proxy, stream):
    response = post(proxy, request(stream, model="acme/no-such-model"))
    assert_refused(response, 404, "not_found_error", "'acme/no-such-model'", MODEL)


@pytest.mark.parametrize(
    ("block", "named"),
    [
        ({"type": "image", "source": {"type": "base64", "data": "AA=="}}, "'image'"),
        ({"type": "document", "source": {"type": "text", "data": "x"}}, "'document'"),
        ({"type": "banana", "text": "x"}, "'banana'"),
        ({"text": "no type"}, "no `type`"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_unsupported_content_block_is_a_400_naming_its_type(proxy, block, named, stream):
    messages = [{"role": "user", "content": [block]}]
    response = post(proxy, request(stream, messages=messages))
    assert_refused(response, 400, "invalid_request_error", named)


def test_count_tokens_refuses_the_same_mistakes(proxy):
    path = "/v1/messages/count_tokens"
    assert_refused(post(proxy, b"{", path=path), 400, "invalid_request_error", "not valid JSON")
    response = post(proxy, {"model": MODEL, "messages": "hi"}, path=path)
    assert_refused(response, 400, "invalid_request_error", "messages")
    response = post(proxy, {"model": "acme/none", "messages": USER}, path=path)
    assert_refused(response, 404, "not_found_error", "'acme/none'")


def test_missing_or_forged_token_is_a_401(proxy):
    url = f"{proxy.url}/v1/messages"
    response = httpx.post(url, json=request())
    assert_refused(response, 401, "authentication_error", "x-api-key")
    response = httpx.post(url, json=request(), headers={"x-api-key": "sk-forged"})
    assert response.status_code == 401 and response.json()["error"]["type"] == (
        "authentication_error"
    )


def test_unknown_route_and_wrong_method_answer_in_anthropics_error_shape(proxy):
    missing = httpx.post(f"{proxy.url}/v1/complete", json={}, headers=auth(proxy))
    assert_refused(missing, 404, "not_found_error", "/v1/complete")
    wrong = httpx.get(f"{proxy.url}/v1/messages", headers=auth(proxy))
    assert_refused(wrong, 405, "invalid_request_error", "GET /v1/messages")


def test_flush_with_a_malformed_body_is_a_400_in_anthropics_error_shape(proxy):
    operator = {"x-api-key": proxy.token(role="operator")}
    response = httpx.post(
        f"{proxy.url}/internal/evidence/flush", json={"attempt_ids": "a-1"}, headers=operator
    )
    assert_refused(response, 400, "invalid_request_error", "attempt_ids")


def test_a_burst_of_bad_requests_leaves_the_proxy_answering_promptly(proxy):
    started = time.monotonic()
    for index in range(20):
        body = b"{" if index % 2 else json.dumps(request(max_tokens=-index)).encode()
        assert post(proxy, body).status_code == 400
    assert time.monotonic() - started < 60
    assert_valid_calls_succeed(proxy)


def test_valid_calls_still_succeed_after_every_bad_request_above(proxy):
    """Runs last in this module: the proxy took all of the above and still samples."""
    assert_valid_calls_succeed(proxy)
