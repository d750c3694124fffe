"""Which TCP addresses processes listen on, read from the kernel.

Each process's socket inodes come from `/proc/PID/fd`; the listening ones and their
addresses from `/proc/net/tcp` and `/proc/net/tcp6` (state 0A is LISTEN).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

TCP_LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    pid: int
    command: str
    address: str
    port: int

    @property
    def loopback(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback


def _address(hex_address: str) -> str:
    """`/proc/net/tcp*` writes addresses as host-order 32-bit words in hex."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def _listening_inodes() -> dict[int, tuple[str, int]]:
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state == TCP_LISTEN:
                address, port = local.split(":")
                found[inode] = (_address(address), int(port, 16))
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except FileNotFoundError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target.removeprefix("socket:[").removesuffix("]")))
    return inodes


def session_processes(session_ids: set[int]) -> dict[int, str]:
    """pid -> command line of every process in the given sessions: a service started in its
    own session and everything it spawned."""
    processes = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(stat[3]) in session_ids:
            processes[int(entry.name)] = cmdline.strip()
    return processes


def listeners(processes: dict[int, str]) -> list[Listener]:
    """Every listening TCP socket the given processes hold."""
    listening = _listening_inodes()
    return [
        Listener(pid, command, *listening[inode])
        for pid, command in processes.items()
        for inode in _socket_inodes(pid)
        if inode in listening
    ]
