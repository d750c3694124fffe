"""Refuse a request body over the gateway's limit before it is taken in (413).

Control requests are small; bulk data goes to the object store through upload grants.
A declared length over the limit is refused unread; a body that grows past it while
streaming (chunked, or lying about its length) is refused at the chunk that crosses it.
Both answer in the error shape (Starlette's own limit answers a declared length in plain
text). The upload route is the exception: its body is a grant's package, which it streams
to the object store and holds to the grant's size itself (`gateway.routes.uploads`).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import error_response


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int, bounded_by_route: tuple[str, ...] = ()) -> None:
        self.app = app
        self.limit = limit
        self.bounded_by_route = bounded_by_route
        """Path prefixes whose routes hold their bodies to limits of their own."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.bounded_by_route):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"")
        if not declared and b"transfer-encoding" not in headers:
            # An HTTP/1.1 request with neither header has no body (RFC 9112, 6.3): nothing
            # to watch, which spares the polls that are most of the gateway's requests.
            await self.app(scope, receive, send)
            return
        if declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send)
            return
        received = 0
        started = refused = False

        async def limited() -> Message:
            # Past the limit the 413 goes out at once and the application is told the
            # client left: an exception here would be taken for a malformed body (400).
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    refused = True
                    if not started:
                        await self._refuse(scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, limited, watched)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            "request_too_large",
            f"the request body is over the gateway's limit of {self.limit} bytes; task "
            "packages and other bulk data go to the object store through an upload grant",
            413,
        )
        await response(scope, receive, send)
