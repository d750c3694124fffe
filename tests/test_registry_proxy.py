"""The registry proxy, a build step's only way out, passes on what a package registry is
asked, and nothing else: not a name off its list, not a listed name that resolves to
this host, not a TLS session with another name through a registry's tunnel."""

from __future__ import annotations

import asyncio
import ssl

from synth_pipelines.sandbox.registry_hosts import RegistryHosts
from synth_pipelines.sandbox.registry_proxy import RegistryProxy


async def ask(hosts: RegistryHosts, request: bytes) -> bytes:
    """The proxy's whole answer to one request."""
    async with RegistryProxy.serving(hosts) as proxy:
        reader, writer = await asyncio.open_unix_connection(proxy.socket_path)
        writer.write(request)
        answer = await reader.read()
        writer.close()
        return answer


def test_name_off_the_list_is_refused_naming_the_list():
    answer = asyncio.run(
        ask(RegistryHosts.of(["pypi.org"]), b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
    )
    assert answer.startswith(b"HTTP/1.1 403")
    assert b"example.com:443 is not a package registry" in answer
    assert b"pypi.org:443" in answer


def test_plain_http_passes_on_only_reads():
    answer = asyncio.run(
        ask(
            RegistryHosts.of(["deb.debian.org"]),
            b"POST http://deb.debian.org/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        )
    )
    assert answer.startswith(b"HTTP/1.1 405")


def test_tunnel_carries_tls_only_with_the_name_it_was_opened_for():
    """A CONNECT to a registry carries only a TLS session with that registry's name."""

    async def handshake(server_name: str) -> str:
        async with RegistryProxy.serving(RegistryHosts.of(["pypi.org"])) as proxy:
            reader, writer = await asyncio.open_unix_connection(proxy.socket_path)
            writer.write(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
            await writer.drain()
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            context = ssl.create_default_context()
            try:
                await writer.start_tls(context, server_hostname=server_name)
            except (ssl.SSLError, ConnectionError) as error:
                return f"refused: {error}"
            finally:
                writer.close()
            return "established"

    assert asyncio.run(handshake("pypi.org")) == "established"
    assert asyncio.run(handshake("example.com")).startswith("refused")


def test_listed_name_that_resolves_to_this_host_reaches_nothing(host_listener):
    """Even a name on the list reaches nothing when it resolves to this host."""
    port, accepted = host_listener

    for request in (
        f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode(),
        f"GET http://localhost:{port}/ HTTP/1.1\r\nHost: localhost\r\n\r\n".encode(),
    ):
        answer = asyncio.run(ask(RegistryHosts.of([f"localhost:{port}"]), request))
        assert answer.startswith(b"HTTP/1.1 403"), answer
        assert b"resolves only to addresses a build may not reach" in answer
    assert accepted == []
