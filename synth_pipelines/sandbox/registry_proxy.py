"""The only way out of an image build step: a forward HTTP proxy to the package registries.

A `RUN` step runs in a network namespace of its own, like an attempt: nothing but its
loopback. This proxy runs in the controller, on the host, on a Unix socket in a private
directory; the build sandbox's route (`route.py`) relays a port on the step's loopback
to it, and `http_proxy`/`https_proxy` in the step's environment name that port, which
pip, apt and npm all honour. Per connection it reads one request head and then:

- `CONNECT name:port` (https): the name and port must be a registry's
  (`registry_hosts.RegistryHosts`); the name is resolved on the host and only an address
  that is neither this host's nor a private network's is connected to; the client's
  first bytes must be a TLS ClientHello naming the same server (SNI), so a tunnel
  opened for a registry cannot speak to another name behind the same address. The
  bytes are then relayed both ways.
- `GET`/`HEAD http://name[:port]/path` (plain http: Debian's archive): the same checks,
  then each request on the connection is passed on in origin form (`GET /path`) with
  its `Host` set to that name, and must name the same host and port; a request with a
  body, or another method, is refused.

Anything else is answered `403` (or `400`/`405`) with the reason, which is also reported
through `on_refusal` (the build's output), so a failing `RUN` says what it tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from synth_pipelines.sandbox.registry_hosts import (
    IPAddress,
    RegistryHosts,
    connectable,
    host_addresses,
)

HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT_SEC = 30.0
CONNECT_TIMEOUT_SEC = 15.0
CHUNK = 65536
TLS_HANDSHAKE = 0x16
TLS_CLIENT_HELLO = 0x01
TLS_RECORD_LIMIT = 16384 + 2048
SNI_EXTENSION = 0x0000
PLAIN_METHODS = (b"GET", b"HEAD")
# Hop-by-hop headers meant for the proxy, never passed on.
PROXY_HEADERS = (b"proxy-connection", b"proxy-authorization", b"host")


class Refused(Exception):
    """A request the proxy will not pass on; `status` and the reason are the answer."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class _Head:
    method: bytes
    target: bytes
    version: bytes
    headers: list[tuple[bytes, bytes]]

    def header(self, name: bytes) -> bytes | None:
        return next((value for key, value in self.headers if key.lower() == name), None)


class RegistryProxy:
    """A forward proxy to `hosts`, serving on `socket_path` (see the module's doc)."""

    def __init__(
        self,
        hosts: RegistryHosts,
        socket_path: Path,
        host_own: frozenset[IPAddress],
        on_refusal: Callable[[str], None] | None,
    ):
        self.hosts = hosts
        self.socket_path = socket_path
        self._host_own = host_own
        self._on_refusal = on_refusal
        self._connections: set[asyncio.Task[None]] = set()

    @classmethod
    @contextlib.asynccontextmanager
    async def serving(
        cls, hosts: RegistryHosts, on_refusal: Callable[[str], None] | None = None
    ) -> AsyncIterator[RegistryProxy]:
        """The proxy, listening on a socket in a directory only root may enter, until
        the block ends; then every connection it holds is closed."""
        directory = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="synth-registry-"))
        try:
            host_own = await asyncio.to_thread(host_addresses)
            proxy = cls(hosts, directory / "proxy.sock", host_own, on_refusal)
            server = await asyncio.start_unix_server(
                proxy._serve, path=proxy.socket_path, limit=HEAD_LIMIT
            )
            try:
                yield proxy
            finally:
                server.close()
                for task in list(proxy._connections):
                    task.cancel()
                with contextlib.suppress(Exception):
                    await server.wait_closed()
        finally:
            await asyncio.to_thread(shutil.rmtree, directory, True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # the server runs each connection in a task of its own
        self._connections.add(task)
        try:
            head = await _read_head(reader)
            if head is None:
                return
            if head.method == b"CONNECT":
                await self._tunnel(head, reader, writer)
            else:
                await self._forward(head, reader, writer)
        except Refused as refused:
            self._refuse(writer, refused)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._connections.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    def _refuse(self, writer: asyncio.StreamWriter, refused: Refused) -> None:
        reason = f"registry proxy: {refused}"
        if self._on_refusal is not None:
            self._on_refusal(reason)
        body = f"{reason}\n".encode()
        with contextlib.suppress(Exception):
            writer.write(
                f"HTTP/1.1 {refused.status}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )

    async def _connect(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to `host`:`port` if it is a registry's, at an address it may
        have; refused otherwise."""
        if not self.hosts.allows(host, port):
            raise Refused(
                "403 Forbidden",
                f"{host}:{port} is not a package registry this build may reach "
                f"(allowed: {self.hosts.describe()}; SYNTH_IMAGE_REGISTRY_HOSTS adds others)",
            )
        loop = asyncio.get_running_loop()
        try:
            found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as error:
            raise Refused("502 Bad Gateway", f"cannot resolve {host}: {error}") from None
        addresses = [str(entry[4][0]) for entry in found]
        allowed, refused = connectable(addresses, self._host_own)
        if not allowed:
            raise Refused(
                "403 Forbidden",
                f"{host} resolves only to addresses a build may not reach: {'; '.join(refused)}",
            )
        failures = []
        for address in dict.fromkeys(allowed):
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_SEC):
                    return await asyncio.open_connection(address, port)
            except (OSError, TimeoutError) as error:
                failures.append(f"{address}: {error or 'timed out'}")
        raise Refused("502 Bad Gateway", f"cannot connect to {host}:{port} ({'; '.join(failures)})")

    async def _tunnel(
        self, head: _Head, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        host, port = _authority(head.target.decode("latin-1"), default_port=443)
        upstream_reader, upstream_writer = await self._connect(host, port)
        try:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            async with asyncio.timeout(HEAD_TIMEOUT_SEC):
                hello = await _client_hello(reader)
            named = _server_name(hello)
            if named is None or named.lower().rstrip(".") != host.lower().rstrip("."):
                if self._on_refusal is not None:
                    self._on_refusal(
                        f"registry proxy: closed the tunnel to {host}:{port}: its TLS "
                        f"handshake names {named or 'no server'}"
                    )
                return
            upstream_writer.write(hello)
            await _relay(reader, writer, upstream_reader, upstream_writer)
        finally:
            with contextlib.suppress(Exception):
                upstream_writer.close()

    async def _forward(
        self, head: _Head, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        host, port = _plain_origin(head)
        upstream_reader, upstream_writer = await self._connect(host, port)
        responses = asyncio.create_task(_pump(upstream_reader, writer))
        try:
            current: _Head | None = head
            while current is not None:
                upstream_writer.write(_origin_form(current, host, port))
                await upstream_writer.drain()
                # No deadline for the next request: the answers to this one may still
                # be streaming back (a large package over a slow link).
                current = await _read_head(reader, timeout_sec=None)
                if current is not None and _plain_origin(current) != (host, port):
                    # Another origin on this connection: the client retries it on a new
                    # one once the answers already asked for have come back.
                    break
            with contextlib.suppress(OSError):
                upstream_writer.write_eof()
            await responses
        finally:
            responses.cancel()
            with contextlib.suppress(Exception):
                upstream_writer.close()


async def _read_head(
    reader: asyncio.StreamReader, *, timeout_sec: float | None = HEAD_TIMEOUT_SEC
) -> _Head | None:
    """The next request head on the connection; None once the client has closed it."""
    try:
        async with asyncio.timeout(timeout_sec):
            raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as ended:
        if ended.partial.strip():
            raise Refused("400 Bad Request", "the request head was cut off") from None
        return None
    lines = raw[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise Refused("400 Bad Request", f"not an HTTP/1 request line: {lines[0][:200]!r}")
    headers = []
    for line in lines[1:]:
        name, separator, value = line.partition(b":")
        if not separator or not name or name != name.strip():
            raise Refused("400 Bad Request", f"malformed header line {line[:200]!r}")
        headers.append((name, value.strip()))
    return _Head(parts[0], parts[1], parts[2], headers)


def _authority(text: str, *, default_port: int) -> tuple[str, int]:
    found = urlsplit(f"//{text}")
    try:
        port = found.port or default_port
    except ValueError:
        raise Refused("400 Bad Request", f"bad port in {text!r}") from None
    if not found.hostname or found.username is not None:
        raise Refused("400 Bad Request", f"no host in {text!r}")
    return found.hostname, port


def _plain_origin(head: _Head) -> tuple[str, int]:
    """The (host, port) a plain-http request is for, once it is one the proxy passes on."""
    target = head.target.decode("latin-1")
    if not target.lower().startswith("http://"):
        raise Refused(
            "400 Bad Request",
            f"{head.method.decode('latin-1')} {target[:200]}: this proxy passes on absolute "
            "http:// requests and CONNECT only",
        )
    if head.method not in PLAIN_METHODS:
        raise Refused("405 Method Not Allowed", f"{head.method.decode('latin-1')} over plain http")
    if (
        head.header(b"transfer-encoding") is not None
        or (head.header(b"content-length") or b"0") != b"0"
    ):
        raise Refused("400 Bad Request", "a request body over plain http")
    return _authority(urlsplit(target).netloc, default_port=80)


def _origin_form(head: _Head, host: str, port: int) -> bytes:
    found = urlsplit(head.target.decode("latin-1"))
    path = found.path or "/"
    if found.query:
        path = f"{path}?{found.query}"
    authority = host if port == 80 else f"{host}:{port}"
    lines = [b" ".join((head.method, path.encode("latin-1"), head.version))]
    lines.append(b"Host: " + authority.encode())
    lines += [
        name + b": " + value for name, value in head.headers if name.lower() not in PROXY_HEADERS
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _client_hello(reader: asyncio.StreamReader) -> bytes:
    """The client's first TLS record, which must hold its ClientHello."""
    header = await reader.readexactly(5)
    length = int.from_bytes(header[3:5])
    if header[0] != TLS_HANDSHAKE or length > TLS_RECORD_LIMIT:
        return header
    return header + await reader.readexactly(length)


def _server_name(record: bytes) -> str | None:
    """The server name (SNI) a ClientHello record asks for, or None."""
    body = memoryview(record)[5:]
    try:
        if record[0] != TLS_HANDSHAKE or body[0] != TLS_CLIENT_HELLO:
            return None
        # handshake type, length (3), version (2), random (32), then variable fields
        at = 4 + 2 + 32
        at += 1 + body[at]  # session id
        at += 2 + int.from_bytes(body[at : at + 2])  # cipher suites
        at += 1 + body[at]  # compression methods
        end = min(len(body), at + 2 + int.from_bytes(body[at : at + 2]))
        at += 2
        while at + 4 <= end:
            kind = int.from_bytes(body[at : at + 2])
            size = int.from_bytes(body[at + 2 : at + 4])
            data = body[at + 4 : at + 4 + size]
            if kind == SNI_EXTENSION and len(data) >= 5 and data[2] == 0:
                name_length = int.from_bytes(data[3:5])
                return bytes(data[5 : 5 + name_length]).decode("ascii")
            at += 4 + size
    except (IndexError, UnicodeDecodeError):
        return None
    return None


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        pass


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
) -> None:
    await asyncio.gather(_pump(reader, upstream_writer), _pump(upstream_reader, writer))
