"""uvicorn's HTTP protocol with a deadline on each request's head.

uvicorn bounds the idle time between requests (keep-alive) but not the time a client may take
to send a request's head: a client that trickles its headers in a byte at a time holds a
connection, and a file descriptor, for as long as it likes. This subclass arms a timer when a
connection opens and when each request begins, disarms it when the head is complete, and
answers 408 and closes the connection if it fires first. It is passed to uvicorn through
its documented `http=` option (a protocol class) and overrides only the protocol's parser
callbacks and asyncio's `Protocol` methods.
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_BODY_408 = json.dumps(
    {"error": {"type": "invalid_request_error", "message": "The request head arrived too slowly."}}
).encode()
_TIMEOUT_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    + b"content-length: %d\r\n\r\n" % len(_BODY_408)
    + _BODY_408
)


class HeadDeadlineProtocol(HttpToolsProtocol):
    head_timeout: float = 10.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = asyncio.get_running_loop().call_later(self.head_timeout, self._expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expired(self) -> None:
        self._head_timer = None
        transport = self.transport
        if not transport.is_closing():
            transport.write(_TIMEOUT_408)
            transport.close()


def head_deadline_protocol(head_timeout: float) -> type[HeadDeadlineProtocol]:
    """The protocol class for uvicorn's `http=` option, with its deadline set."""
    return type("HeadDeadlineProtocol", (HeadDeadlineProtocol,), {"head_timeout": head_timeout})
