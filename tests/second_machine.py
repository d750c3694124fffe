"""A second machine on the network, as a network namespace joined to this host by a veth
pair: from it, this host is one address, where only what listens on that address (the
gateway's `--listen`) answers; its loopback is its own. Its commands run in a mount
namespace of their own where this host's state directory is an empty filesystem, so they
cannot read it either."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass(frozen=True)
class SecondMachine:
    namespace: str
    host_address: str
    """This host as the second machine reaches it."""
    home: Path
    """The second machine's user's own directory (its HOME and state directory)."""
    hidden: Path
    """This host's state directory, which the second machine sees empty."""

    def run(
        self, argv: list[str], env: dict[str, str], *, timeout: float = 600
    ) -> subprocess.CompletedProcess:
        """`argv` on the second machine, with `env` only."""
        return subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.namespace,
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                'mount -t tmpfs hidden "$0" && exec "$@"',
                str(self.hidden),
                *argv,
            ],
            env={"PATH": os.environ["PATH"], "HOME": str(self.home), **env},
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def connects(self, address: str, port: int) -> bool:
        """Whether a TCP connection from the second machine to `address:port` opens."""
        probe = (
            "import socket, sys\n"
            "try:\n"
            f"    socket.create_connection(({address!r}, {port}), timeout=3).close()\n"
            "except OSError:\n"
            "    sys.exit(1)\n"
        )
        return self.run([sys.executable, "-c", probe], {}).returncode == 0


@contextmanager
def second_machine(home: Path, hidden: Path) -> Iterator[SecondMachine]:
    """A namespace whose one link leads to this host, at a private /30 of its own; its
    commands see `hidden` (this host's state directory) empty."""
    suffix = secrets.token_hex(3)
    namespace, host_link, its_link = f"synth-{suffix}", f"vh{suffix}", f"vn{suffix}"
    subnet = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(256)}"
    host_address, its_address = f"{subnet}.1", f"{subnet}.2"
    home.mkdir(parents=True, exist_ok=True)
    hidden.mkdir(parents=True, exist_ok=True)
    _ip("netns", "add", namespace)
    try:
        _ip("link", "add", host_link, "type", "veth", "peer", "name", its_link)
        _ip("link", "set", its_link, "netns", namespace)
        _ip("addr", "add", f"{host_address}/30", "dev", host_link)
        _ip("link", "set", host_link, "up")
        _ip("-n", namespace, "addr", "add", f"{its_address}/30", "dev", its_link)
        _ip("-n", namespace, "link", "set", its_link, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        yield SecondMachine(namespace, host_address, home, hidden)
    finally:
        subprocess.run(["ip", "link", "del", host_link], capture_output=True)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
