"""Background services of the embedded default: started once, found again, stopped cleanly.

Each service runs detached in its own session with a pid file and a log file under the
state directory, so `synth up` run twice finds what is already running instead of
starting a second copy. The command line it was started with is kept beside the pid: a
service running with another configuration (say another base model) is restarted. Every
service starts with the owner-only umask (`state_locations.OWNER_ONLY_UMASK`).

One process at a time starts or stops a service of a state directory: it holds the
service's lock (`storage/pid_lock.py`) from reading the pid file until the service is
ready or gone. Without it, two `synth up` run at once each started the service and wrote
its pid file: the one whose copy lost the port recorded a dead pid, and the copy that
served was left running where `synth down` could not find it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from synth_pipelines.state_locations import OWNER_ONLY_UMASK
from synth_pipelines.storage.pid_lock import pid_lock
from synth_pipelines.tls import client_context


@dataclass(frozen=True)
class Service:
    name: str
    argv: list[str]
    health_url: str | None
    address: str
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout_sec: float = 120.0
    # What asks it to stop cleanly (PostgreSQL's SIGTERM waits for every client to leave).
    stop_signal: int = signal.SIGTERM
    ca_file: Path | None = None
    """The authority its health URL's certificate is checked against; None: the system's."""


class ServiceStartError(RuntimeError):
    pass


class ServiceBusyError(RuntimeError):
    """Another process is starting or stopping the service in this state directory."""


def _pid_file(state_dir: Path, name: str) -> Path:
    return state_dir / "services" / f"{name}.pid"


def _argv_file(state_dir: Path, name: str) -> Path:
    return state_dir / "services" / f"{name}.argv.json"


def log_file(state_dir: Path, name: str) -> Path:
    return state_dir / "logs" / f"{name}.log"


def _handled_alone(state_dir: Path, service: Service) -> AbstractContextManager[None]:
    def busy(holder: str) -> ServiceBusyError:
        return ServiceBusyError(
            f"another process (pid {holder}, a `synth up` or `synth down`) is starting or "
            f"stopping {service.name} in {state_dir}; wait for it to finish, then run this "
            "again"
        )

    lock = state_dir / "services" / f"{service.name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    return pid_lock(lock, busy)


def running_pid(state_dir: Path, service: Service) -> int | None:
    path = _pid_file(state_dir, service.name)
    try:
        pid = int(path.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ValueError, ProcessLookupError, IndexError):
        return None
    if state == "Z":
        return None
    # The command line is empty for a moment while the process execs, and some servers
    # rewrite their process title, so look for the program name anywhere in it.
    return pid if not cmdline or Path(service.argv[0]).name.encode() in cmdline else None


def healthy(service: Service) -> bool:
    """Ready when its health URL answers below 500, or, for a `unix://` one, when its
    socket accepts a connection."""
    if service.health_url is None:
        return True
    if service.health_url.startswith("unix://"):
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(service.health_url.removeprefix("unix://"))
            except OSError:
                return False
            return True
    try:
        # A service whose certificate its own authority signed (the gateway's generated
        # one) is checked against that authority, once the service has made it.
        verify = (
            ssl.create_default_context(cafile=service.ca_file)
            if service.ca_file is not None
            else client_context()
        )
        return httpx.get(service.health_url, timeout=2.0, verify=verify).status_code < 500
    except (httpx.HTTPError, OSError):
        return False


def start(state_dir: Path, service: Service, cwd: Path) -> tuple[int, bool]:
    """Start the service unless it already runs; returns (pid, started_now). Refused with
    `ServiceBusyError` while another process starts or stops it."""
    with _handled_alone(state_dir, service):
        return _start(state_dir, service, cwd)


def _started_otherwise(state_dir: Path, service: Service) -> bool:
    try:
        started: object = json.loads(_argv_file(state_dir, service.name).read_text())
    except (FileNotFoundError, ValueError):
        return False
    return started != service.argv


def reconfigured(state_dir: Path, service: Service) -> bool:
    """Whether the service runs with another command line than `service`'s: `start`
    would stop it and start it again."""
    return running_pid(state_dir, service) is not None and _started_otherwise(state_dir, service)


def _start(state_dir: Path, service: Service, cwd: Path) -> tuple[int, bool]:
    pid = running_pid(state_dir, service)
    if pid is not None:
        if not _started_otherwise(state_dir, service):
            _wait_ready(state_dir, service, pid)
            return pid, False
        _stop(state_dir, service)
    log = log_file(state_dir, service.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    _pid_file(state_dir, service.name).parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        process = subprocess.Popen(
            service.argv,
            cwd=cwd,
            env={**os.environ, **service.env},
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # What a service writes (the Dagster daemon's and webserver's storage, the
            # services' own files) is its owner's, whoever started it.
            umask=OWNER_ONLY_UMASK,
        )
    _pid_file(state_dir, service.name).write_text(str(process.pid))
    _argv_file(state_dir, service.name).write_text(json.dumps(service.argv))
    _wait_ready(state_dir, service, process.pid)
    return process.pid, True


def _wait_ready(state_dir: Path, service: Service, pid: int) -> None:
    deadline = time.monotonic() + service.ready_timeout_sec
    while time.monotonic() < deadline:
        if running_pid(state_dir, service) != pid:
            raise ServiceStartError(
                f"{service.name} exited during start-up; see {log_file(state_dir, service.name)}"
            )
        if healthy(service):
            return
        time.sleep(0.5)
    raise ServiceStartError(
        f"{service.name} did not become ready at {service.health_url} within "
        f"{service.ready_timeout_sec:.0f} s; see {log_file(state_dir, service.name)}"
    )


def stop(state_dir: Path, service: Service, timeout_sec: float = 20.0) -> bool:
    """Stop the service if it runs; returns whether it did. Refused with
    `ServiceBusyError` while another process starts or stops it."""
    with _handled_alone(state_dir, service):
        return _stop(state_dir, service, timeout_sec)


def _stop(state_dir: Path, service: Service, timeout_sec: float = 20.0) -> bool:
    pid = running_pid(state_dir, service)
    if pid is None:
        _pid_file(state_dir, service.name).unlink(missing_ok=True)
        return False
    os.killpg(pid, service.stop_signal)
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline and running_pid(state_dir, service) == pid:
        time.sleep(0.2)
    if running_pid(state_dir, service) == pid:
        os.killpg(pid, signal.SIGKILL)
    _pid_file(state_dir, service.name).unlink(missing_ok=True)
    return True
