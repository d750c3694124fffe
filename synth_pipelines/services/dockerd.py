"""The platform's own Docker daemon, for Harbor's docker environment.

`dockerd` runs detached with everything it owns in one directory (`DockerDaemon.of`): data
root (images, containers, build cache), exec root (its containerd, runtime state),
pidfile, socket, log and the client configuration that holds the Compose plugin. That
directory is in the image cache, beside the local builder's layers: the daemon's image
store is a build cache like theirs, kept between runs and shared by every state
directory that shares the cache (one daemon per data root). A lock file makes starting
it safe from several processes at once; the first one starts it, the others find it.

It never touches what a system daemon owns: its own socket and pidfile, no default
bridge (`--bridge=none`), and no iptables rules (a second daemon managing Docker's
chains would flush the first one's). So no container gets NAT: a compose network joins
a task's services to each other, not to the internet. The daemon builds no image: the
platform's isolated builder does, and its result is imported
(`runtime/docker_environment.py`).
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from synth_pipelines.services import supervisor

# A Unix socket's path must fit in `sun_path` (108 bytes with its terminating NUL).
MAX_SOCKET_PATH = 107
# The longest socket path dockerd's own containerd makes under the exec root.
_LONGEST_EXEC_SOCKET = "containerd/containerd-debug.sock"
_SERVICE = "dockerd"


class DockerDaemonError(RuntimeError):
    """The private Docker daemon cannot be used; the message says what to install or fix."""


@dataclass(frozen=True)
class DockerDaemon:
    """A dockerd whose whole state lives under `root`, its clients using the Compose
    plugin at `compose_plugin` when there is one there (else the host's)."""

    root: Path
    compose_plugin: Path
    ready_timeout_sec: float = 60.0

    @classmethod
    def of(cls, images_dir: Path, project_root: Path) -> DockerDaemon:
        """The platform's daemon: its directory in the image cache (`images_dir`), the
        Compose plugin the one `make setup` unpacks into the project."""
        return cls(
            images_dir / "docker",
            project_root / ".tools" / "docker" / "cli-plugins" / "docker-compose",
        )

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def host(self) -> str:
        """The `DOCKER_HOST` (or `docker --host`) that reaches this daemon."""
        return f"unix://{self.socket}"

    @property
    def client_config(self) -> Path:
        """The `DOCKER_CONFIG` (or `docker --config`) its clients use: the Compose plugin
        is linked in, and Compose keeps its build records there."""
        return self.root / "client"

    @property
    def log(self) -> Path:
        return supervisor.log_file(self.root, _SERVICE)

    def service(self) -> supervisor.Service:
        config_file = self.root / "daemon.json"
        return supervisor.Service(
            name=_SERVICE,
            argv=[
                "dockerd",
                # Its own empty configuration: a system daemon's /etc/docker/daemon.json
                # (ports, bridges, registries) is not read.
                f"--config-file={config_file}",
                f"--data-root={self.root / 'data'}",
                f"--exec-root={self.root / 'exec'}",
                f"--pidfile={self.root / 'dockerd.pid'}",
                f"--host={self.host}",
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
                "--ip-masq=false",
            ],
            health_url=self.host,
            address=self.host,
            ready_timeout_sec=self.ready_timeout_sec,
        )

    def running(self) -> bool:
        return supervisor.running_pid(self.root, self.service()) is not None

    def ensure(self) -> str:
        """Start the daemon unless it runs already; returns the host its clients use."""
        for program in ("dockerd", "docker"):
            if shutil.which(program) is None:
                raise DockerDaemonError(
                    f"Harbor's docker environment needs {program} on the host "
                    "(apt-get install docker.io; `make setup` installs it)"
                )
        self._check_paths()
        with self._locked():
            self._link_compose_plugin()
            if not _compose_works(self.client_config):
                raise DockerDaemonError(
                    "Harbor's docker environment needs Docker Compose v2 (`docker compose`); "
                    "`make setup` installs it into .tools/docker"
                )
            config_file = self.root / "daemon.json"
            if not config_file.exists():
                config_file.write_text("{}\n")
            try:
                supervisor.start(self.root, self.service(), cwd=self.root)
            except supervisor.ServiceStartError as error:
                raise DockerDaemonError(f"{error}:\n{self._log_tail()}") from None
        return self.host

    def stop(self, timeout_sec: float = 30.0) -> bool:
        """Stop the daemon (it stops its containers first); False if it was not running.

        Only dockerd itself is signalled: its containerd and the containers' shims must
        outlive it until it has stopped the containers through them.
        """
        with self._locked():
            service = self.service()
            pid = supervisor.running_pid(self.root, service)
            if pid is None:
                return False
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_sec
            while time.monotonic() < deadline and supervisor.running_pid(self.root, service):
                time.sleep(0.2)
            if supervisor.running_pid(self.root, service) == pid:
                os.kill(pid, signal.SIGKILL)
            _reap(pid)
            return True

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.root / "dockerd.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    def _check_paths(self) -> None:
        longest = max(
            (self.socket, self.root / "exec" / _LONGEST_EXEC_SOCKET), key=lambda p: len(str(p))
        )
        if len(str(longest).encode()) > MAX_SOCKET_PATH:
            raise DockerDaemonError(
                f"the Docker daemon's directory {self.root} is too deep for its sockets "
                f"({longest} is longer than {MAX_SOCKET_PATH} bytes); point "
                "SYNTH_IMAGE_CACHE_DIR at a shorter path"
            )

    def _link_compose_plugin(self) -> None:
        """Compose v2 as a CLI plugin of this daemon's clients: `compose_plugin`, when
        there is one (else the host's, found by the docker CLI in its system plugin
        directories)."""
        plugin = self.compose_plugin
        link = self.client_config / "cli-plugins" / "docker-compose"
        if not plugin.exists() or (link.is_symlink() and link.readlink() == plugin):
            return
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(plugin)

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def _reap(pid: int) -> None:
    """Collect the exit status when this process started the daemon (no zombie left)."""
    with suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


@functools.cache
def _compose_works(client_config: Path) -> bool:
    found = subprocess.run(
        ["docker", "--config", str(client_config), "compose", "version"],
        capture_output=True,
        timeout=30,
    )
    return found.returncode == 0
