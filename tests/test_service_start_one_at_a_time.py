"""One process at a time starts or stops a service of a state directory (`synth up`,
`synth down`), so a second model service is never started over the running one's record.

Before, two `synth up` run at once each started the service and wrote its pid file: the
copy that lost the port died with its pid recorded, and the copy that served was left
running where `synth down` could not find it (the next `synth up` then failed on the port
until it was killed by hand). Now the second is refused in one line naming the first, or
finds the service the first started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from synth_pipelines.services.embedded import MODEL_SERVICE
from synth_pipelines.services.supervisor import Service, running_pid, stop
from tests.conftest import PROJECT_ROOT
from tests.production_services import free_port

ROUNDS = 4
# Two processes that call `start` at the same moment, as two `synth up` would.
RACER = """
import json, sys, time
from pathlib import Path
from synth_pipelines.services.supervisor import Service, start
state, service, at = Path(sys.argv[1]), Service(**json.loads(sys.argv[2])), float(sys.argv[3])
while time.time() < at:
    pass
try:
    pid, started = start(state, service, cwd=state)
    print(json.dumps({"pid": pid, "started": started}))
except RuntimeError as error:  # refused, or the service failed to start
    print(json.dumps({"refused": str(error)}))
"""
# A server that answers only after `delay` seconds: its start-up holds the service's lock.
SLOW_SERVER = (
    "import http.server, sys, time; time.sleep(float(sys.argv[2])); "
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), "
    "http.server.SimpleHTTPRequestHandler).serve_forever()"
)


def _server(name: str, port: int, delay: float = 0.5) -> dict:
    return {
        "name": name,
        "argv": [sys.executable, "-c", SLOW_SERVER, str(port), str(delay)],
        "health_url": f"http://127.0.0.1:{port}/",
        "address": f"http://127.0.0.1:{port}",
        "ready_timeout_sec": 60.0,
    }


def _serving(port: int) -> list[int]:
    """The pids of this test's servers on `port`, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if SLOW_SERVER.encode() in argv and str(port).encode() in argv:
            found.append(int(entry.name))
    return found


def _racers(state: Path, service: dict) -> list[dict]:
    at = time.time() + 3
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(state), json.dumps(service), str(at)],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    return [json.loads(racer.communicate(timeout=120)[0]) for racer in racers]


def test_two_starts_at_once_leave_the_one_running_service_recorded(tmp_path):
    for round_ in range(ROUNDS):
        state, port = tmp_path / f"state-{round_}", free_port()
        spec = _server("files", port)
        service = Service(**spec)
        try:
            answers = _racers(state, spec)
            recorded = running_pid(state, service)
            assert recorded is not None and _serving(port) == [recorded], answers
            started = [answer for answer in answers if answer.get("started")]
            assert len(started) == 1 and started[0]["pid"] == recorded, answers
            for answer in answers:
                if "refused" in answer:
                    assert f"is starting or stopping files in {state}" in answer["refused"]
                else:
                    assert answer["pid"] == recorded
            assert stop(state, service)
            assert _serving(port) == []
        finally:
            for pid in _serving(port):
                os.kill(pid, signal.SIGKILL)


def test_synth_down_while_a_service_starts_is_one_line_exit_2(tmp_path):
    state, port = tmp_path / "state", free_port()
    spec = _server(MODEL_SERVICE, port, delay=60)
    starting = subprocess.Popen(
        [sys.executable, "-c", RACER, str(state), json.dumps(spec), "0"],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while running_pid(state, Service(**spec)) is None:
            assert time.monotonic() < deadline, "the service was never started"
            time.sleep(0.1)
        down = subprocess.run(
            [sys.executable, "-m", "synth_pipelines.cli", "down"],
            cwd=PROJECT_ROOT,
            env={**os.environ, "SYNTH_DATA_DIR": str(state)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert down.returncode == 2, down.stdout + down.stderr
        (line,) = down.stderr.strip().splitlines()
        assert f"pid {starting.pid}" in line and f"stopping {MODEL_SERVICE}" in line
        assert _serving(port) == [running_pid(state, Service(**spec))]
    finally:
        starting.kill()
        starting.wait()
        for pid in _serving(port):
            os.kill(pid, signal.SIGKILL)
