"""Where an image build step may connect: the package registries, by name, and never an
address of this host or of a private network.

A `RUN` step's only way out is the registry proxy (`registry_proxy.py`), which asks this
module twice: whether a name and port are a registry's (`RegistryHosts.allows`), and
which of the addresses the host's resolver gives for it may be connected to
(`connectable`). The name is resolved on the host, never inside the sandbox, and the
proxy connects to the checked address itself, so a name that resolves to the host's
loopback (a rebinding resolver, an `/etc/hosts` entry) reaches nothing.

The refused networks are listed here rather than taken from `ipaddress`'s `is_private`:
that also covers the documentation ranges (192.0.2.0/24, 203.0.113.0/24, ...), which
hosts behind an egress gateway may be given for real registries.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_PORTS = (80, 443)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

REFUSED_NETWORKS = tuple(
    ipaddress.ip_network(network)
    for network in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",
        "100.64.0.0/10",  # carrier-grade NAT
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local, cloud metadata services
        "172.16.0.0/12",
        "192.168.0.0/16",
        "224.0.0.0/3",  # multicast and reserved, broadcast
        "::/127",  # unspecified and loopback
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "ff00::/8",  # multicast
    )
)
"""Loopback, private, link-local and multicast networks: what belongs to this host or to
the network it stands in, never to a public registry."""

HOST_ADDRESS_FILES = (Path("/proc/net/fib_trie"), Path("/proc/net/if_inet6"))


@dataclass(frozen=True)
class RegistryHosts:
    """The (name, port) pairs a build step may reach, lowercased."""

    allowed: frozenset[tuple[str, int]]

    @classmethod
    def of(cls, entries: Iterable[str], *, mirror: str | None = None) -> RegistryHosts:
        """`entries` as `name` (ports 80 and 443) or `name:port`; `mirror`, a URL, adds
        its host (the Debian mirror the bases' apt sources name)."""
        allowed: set[tuple[str, int]] = set()
        for entry in entries:
            name, separator, port = entry.strip().lower().rpartition(":")
            if not separator:
                name, port = port, ""
            if not name or (port and not port.isdigit()):
                raise ValueError(
                    f"registry host {entry!r} must be a host name, optionally with ':PORT'"
                )
            allowed.update((name, int(p)) for p in ((port,) if port else DEFAULT_PORTS))
        if mirror:
            found = urlsplit(mirror)
            if found.hostname:
                allowed.add((found.hostname.lower(), found.port or _scheme_port(found.scheme)))
        return cls(frozenset(allowed))

    def allows(self, host: str, port: int) -> bool:
        return (host.lower().rstrip("."), port) in self.allowed

    def describe(self) -> str:
        return ", ".join(f"{name}:{port}" for name, port in sorted(self.allowed))


def _scheme_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def host_addresses() -> frozenset[IPAddress]:
    """Every address of this host's interfaces (blocking: read once, off the loop)."""
    found: set[IPAddress] = set()
    fib_trie, if_inet6 = HOST_ADDRESS_FILES
    previous = ""
    try:
        for line in fib_trie.read_text().splitlines():
            text = line.strip()
            if text.startswith("/32 host LOCAL") and previous.startswith("|-- "):
                found.add(ipaddress.ip_address(previous[4:]))
            previous = text
    except FileNotFoundError:
        pass
    try:
        for line in if_inet6.read_text().splitlines():
            found.add(ipaddress.IPv6Address(int(line.split()[0], 16)))
    except FileNotFoundError:
        pass
    return frozenset(found)


def refusal(address: IPAddress, host_own: frozenset[IPAddress]) -> str | None:
    """Why `address` may not be connected to, or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in host_own:
        return "an address of this host"
    for network in REFUSED_NETWORKS:
        if address.version == network.version and address in network:
            return f"in {network} (loopback, private, link-local or multicast)"
    return None


def connectable(
    resolved: Iterable[str], host_own: frozenset[IPAddress]
) -> tuple[list[str], list[str]]:
    """The resolved addresses that may be connected to, and why each other may not."""
    allowed, refused = [], []
    for text in resolved:
        address = ipaddress.ip_address(text.partition("%")[0])
        reason = refusal(address, host_own)
        if reason is None:
            allowed.append(text)
        else:
            refused.append(f"{text} is {reason}")
    return allowed, refused
