"""The built-in agent's Messages client: retries what a retry can cure, stops on a refusal
with a logged reason, and sends the attempt's token the way the `anthropic` SDK does."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import synth_pipelines.agents.builtin as builtin

AGENT = Path(builtin.__file__)
DONE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "Done.", "citations": None}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


class _Model:
    """A Messages endpoint that answers with the statuses it is given, then with `DONE`."""

    def __init__(self, statuses: list[int]):
        self.statuses = statuses
        self.requests: list[tuple[dict[str, str], dict]] = []


@pytest.fixture
def model() -> Iterator[tuple[_Model, str]]:
    state = _Model([])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            state.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
            status = state.statuses.pop(0) if state.statuses else 200
            payload = DONE if status == 200 else {"type": "error", "error": {"message": "no"}}
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _run(url: str, tmp_path: Path) -> tuple[int, list[dict]]:
    done = subprocess.run(
        [sys.executable, str(AGENT), "--model", "m", "--max-steps", "2", "say hi"],
        env={"ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": "scoped-token", "PATH": "/usr/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()]


def test_overloaded_answers_are_retried_and_the_token_is_sent_as_bearer(
    model: tuple[_Model, str], tmp_path: Path
) -> None:
    state, url = model
    state.statuses = [529, 503]

    code, events = _run(url, tmp_path)

    assert code == 0
    assert [event["event"] for event in events] == ["reply", "done"]
    assert events[0]["content"] == [{"type": "text", "text": "Done."}]
    assert len(state.requests) == 3
    headers, body = state.requests[-1]
    assert headers["authorization"] == "Bearer scoped-token"
    assert body["messages"] == [{"role": "user", "content": "say hi"}]
    assert {tool["name"] for tool in body["tools"]} == {"bash", "write_file"}


def test_a_refused_call_ends_the_agent_with_the_reason_and_no_retry(
    model: tuple[_Model, str], tmp_path: Path
) -> None:
    state, url = model
    state.statuses = [401]

    code, events = _run(url, tmp_path)

    assert code == 1
    assert events[-1]["event"] == "model_error"
    assert "HTTP 401" in events[-1]["error"]
    assert len(state.requests) == 1
