"""Request bodies read within bounds: size, time, rate, and how many are read at once.

Every body (chat, admin, imports) passes through one `BodyReader`, which wraps the ASGI
`receive` the app reads from. The size is counted as the chunks arrive, so a body over the
limit is refused before it is held whole; a declared `Content-Length` over it is refused before
a byte is read. A body that trickles in slower than the minimum rate or takes longer than the
read timeout is refused too, so a slow client cannot keep a slot (and a file descriptor) for
long. An import (`POST /v1/admin/tokens/{id}/import`) has its own, larger size and time limits
(`MAX_IMPORT_BYTES`, `IMPORT_READ_TIMEOUT`): it is staged on disk as it arrives, never held.
Refusals are `BodyRefused`, a `ProxyError`: FastAPI's handler and the edge both render it.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field

from starlette.types import Message, Receive, Scope

from memory_bridge.core.errors import ProxyError
from memory_bridge.settings import Settings

# The rate is judged only after this long: a request's first bytes may arrive in one burst.
_RATE_GRACE = 2.0
# How long a request waits for a reading slot before it is told to come back later.
_SLOT_WAIT = 5.0
IMPORT_PATH = re.compile(r"^/v1/admin/tokens/[^/]+/import$")


class BodyRefused(ProxyError):
    pass


@dataclass
class BodyLimits:
    max_bytes: int
    read_timeout: float
    min_rate: int
    max_reading: int
    import_bytes: int = 0
    import_timeout: float = 0.0
    reading: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.reading = asyncio.Semaphore(self.max_reading)

    @classmethod
    def from_settings(cls, settings: Settings) -> BodyLimits:
        return cls(
            max_bytes=settings.max_request_bytes,
            read_timeout=settings.body_read_timeout,
            min_rate=settings.min_body_rate,
            max_reading=settings.max_reading_requests,
            import_bytes=settings.max_import_bytes,
            import_timeout=settings.import_read_timeout,
        )


def too_large(limit: int) -> BodyRefused:
    return BodyRefused(
        413, "invalid_request_error", f"The request body exceeds the limit of {limit} bytes."
    )


class BodyReader:
    """The `receive` of one request, bounded; `release()` when the request is over."""

    __slots__ = (
        "_done",
        "_holds_slot",
        "_limits",
        "_max",
        "_read",
        "_receive",
        "_scope",
        "_started",
        "_timeout",
    )

    def __init__(self, limits: BodyLimits, scope: Scope, receive: Receive) -> None:
        self._limits = limits
        self._scope = scope
        self._receive = receive
        self._done = False
        self._holds_slot = False
        self._read = 0
        self._started = 0.0
        self._max, self._timeout = limits.max_bytes, limits.read_timeout
        if limits.import_bytes and IMPORT_PATH.match(scope.get("path", "")):
            self._max = max(self._max, limits.import_bytes)
            self._timeout = max(self._timeout, limits.import_timeout)

    async def receive(self) -> Message:
        if self._done:
            return await self._receive()  # past the body: only the disconnect is left to see
        if not self._started:
            await self._begin()
        message = await self._next()
        if message["type"] != "http.request":
            return message
        self._read += len(message.get("body", b""))
        if self._read > self._max:
            raise too_large(self._max)
        if not message.get("more_body", False):
            self._done = True
            self.release()
        return message

    @property
    def read_bytes(self) -> int:
        return self._read

    def release(self) -> None:
        if self._holds_slot:
            self._holds_slot = False
            self._limits.reading.release()

    async def _begin(self) -> None:
        self._started = time.monotonic()
        declared = content_length(self._scope)
        if declared is not None and declared > self._max:
            raise too_large(self._max)
        try:
            async with asyncio.timeout(min(self._timeout, _SLOT_WAIT)):
                await self._limits.reading.acquire()
        except TimeoutError:
            raise BodyRefused(
                503, "service_unavailable", "Too many requests are being read; try again."
            ) from None
        self._holds_slot = True

    async def _next(self) -> Message:
        limits = self._limits
        elapsed = time.monotonic() - self._started
        wait = self._timeout - elapsed
        if limits.min_rate:
            # By when the next chunk must have come for the body to keep the minimum rate.
            wait = min(wait, _RATE_GRACE + self._read / limits.min_rate - elapsed)
        try:
            async with asyncio.timeout(max(wait, 0.0)):
                return await self._receive()
        except TimeoutError:
            raise BodyRefused(
                408, "invalid_request_error", "The request body arrived too slowly."
            ) from None


def content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return None
            return length if length >= 0 else None
    return None


__all__ = ["BodyLimits", "BodyReader", "BodyRefused", "content_length", "too_large"]
