"""How many connections each of the proxy's listeners holds, and how long a request head
may take to arrive.

uvicorn bounds neither: a connection that sends half a request line, or nothing, is held
until its client closes it (its keep-alive timeout starts only after a first response, and
any byte stops it), and `limit_concurrency` answers 503 to every caller once the server as a
whole is full. Before, 400 such connections were all held, and 50 were still open 240 s
later. Here, per connection:

- a listener that already holds its `connections` closes a new one as soon as it is
  accepted, before reading anything: the Unix socket sandboxes reach (`connections_unix`,
  shared by every sandbox's route, each of which holds at most its own share, see
  `sandbox/route.py`) and the TCP address operators reach (`connections_tcp`) are counted
  apart, so a flood on one leaves the other open;
- a request head (request line and headers) must be complete within `head_timeout_sec` of
  the connection's start, or of its first byte on a kept-alive connection, or the connection
  is closed; the idle time between requests is uvicorn's keep-alive timeout
  (`keep_alive_sec`). A request whose body is slow to arrive has been authenticated by
  then: one token holds at most its places in `messages` that way
  (`sampling_limits.py`), and a sandbox at most the connections its route relays.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


@dataclass(frozen=True)
class ListenerLimits:
    head_timeout_sec: float = 10.0
    """A harness sends its whole head at once; ten seconds is for a host under load."""
    connections_unix: int = 512
    connections_tcp: int = 256
    """Both together stay well inside a process's default 1024 file descriptors, with room
    for the spool, the database and the workers."""
    keep_alive_sec: int = 5

    def connections(self, listener: tuple[str, int | None] | None) -> int:
        """The limit of the listener a connection came in on: only a TCP one has a port."""
        tcp = listener is not None and listener[1] is not None
        return self.connections_tcp if tcp else self.connections_unix


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol, held to `limits` (a subclass per server sets them)."""

    limits: ClassVar[ListenerLimits] = ListenerLimits()
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self._listener_connections() > self.limits.connections(self.server):
            transport.close()
            return
        self._await_head()

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        between_requests = cycle is None or cycle.response_complete
        super().data_received(data)
        if self.cycle is not cycle:
            # A head arrived whole (uvicorn starts a request cycle for each).
            self._stop_waiting()
        elif between_requests and self._head_timer is None and not self.transport.is_closing():
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _listener_connections(self) -> int:
        """Open connections of this one's listener, this one included."""
        return sum(
            1
            for connection in self.connections
            if isinstance(connection, HttpToolsProtocol)
            and connection.server == self.server
            and not connection.transport.is_closing()
        )

    def _await_head(self) -> None:
        self._head_timer = self.loop.call_later(self.limits.head_timeout_sec, self._head_late)

    def _stop_waiting(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def limited_protocol(limits: ListenerLimits) -> type[LimitedHttpProtocol]:
    """The protocol class a uvicorn server is given (`http=`), holding its connections to
    `limits`."""
    return type("LimitedHttpProtocol", (LimitedHttpProtocol,), {"limits": limits})
