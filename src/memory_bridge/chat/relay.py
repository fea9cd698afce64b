"""Passing the upstream's answer on to our client: SSE in whole events, other bodies bounded.

The bytes are the upstream's, unchanged; what the relay decides is only where they are cut
and how much of them it holds. Both run on the hot path (docs/performance.md): per read, an
event stream costs a suffix check in the usual case (a read of whole events), and a body is
read in one call when its length is known to fit.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from memory_bridge.chat.capture import StreamCapture
from memory_bridge.chat.sse import EventBuffer
from memory_bridge.chat.upstream import UPSTREAM_ERRORS, Opened
from memory_bridge.core.turn import Reply

log = logging.getLogger(__name__)

SSE = "text/event-stream"

# Stores a captured reply; False when the turn could not be stored (the client is told).
Remember = Callable[[Reply], Awaitable[bool]]
# An SSE comment: OpenAI SDKs skip it, a client reading the raw stream can see it.
NOT_STORED = b": memorybridge stored=false\n\n"


class Capture(Protocol):
    """Watches a copy of an event stream and assembles the reply (one per wire format)."""

    @property
    def done(self) -> bool:
        """Has the event that ends the stream come (after it, nothing is appended)?"""
        ...

    @property
    def complete(self) -> bool:
        """Did the upstream say its reply was whole?"""
        ...

    @property
    def overflowed(self) -> bool: ...

    def feed(self, chunk: bytes) -> bool:
        """Consume whole events; True only for the read that completed the final event (the
        turn is stored before that read is relayed)."""
        ...

    def finish(self) -> Reply | None: ...


@dataclass(frozen=True, slots=True)
class StreamFormat:
    """What differs between wire formats' event streams.

    `capture(limit)` makes the side parser; `broken(exc, last)` is the in-band ending of a
    stream the upstream broke off, given the last whole events relayed before the break.
    """

    capture: Callable[[int], Capture]
    broken: Callable[[Exception, bytes], bytes]


def chat_stream_error(exc: Exception, last: bytes) -> bytes:
    """A chat completion stream's error chunk and `[DONE]`: the openai SDK raises it."""
    error = {
        "error": {
            "message": f"The upstream stream broke off ({type(exc).__name__}).",
            "type": "upstream_stream_error",
            "code": None,
        }
    }
    return b"data: " + json.dumps(error).encode() + b"\n\ndata: [DONE]\n\n"


CHAT_STREAM = StreamFormat(StreamCapture, chat_stream_error)


class UpstreamBodyBroken(Exception):
    """An upstream body broke off after our response had started: raised out of the stream
    so the server aborts the response, and the client cannot take a truncated body for a
    whole one (there is no in-band error for a JSON body)."""


def is_sse(opened: Opened) -> bool:
    return opened.content_type.startswith(SSE)


def stream_headers(
    opened: Opened, diagnostics: list[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    # Tells buffering reverse proxies (nginx) in front of us to pass events on at once.
    return [*opened.headers, (b"x-accel-buffering", b"no"), *diagnostics]


async def relay_events(
    opened: Opened,
    limit: int,
    remember: Remember | None = None,
    fmt: StreamFormat = CHAT_STREAM,
) -> AsyncGenerator[bytes, None]:
    """The upstream's event stream, in whole events; with `remember`, the reply is captured on
    the side (by the format's capture) and handed to it once the stream is over, if the
    capture's `finish` finds one.

    When the upstream breaks off, the event it was in the middle of is dropped and the stream
    ends with the format's in-band error, which OpenAI SDKs raise as an API error. A broken
    stream is never stored, unless its final event had already come (then it was stored before
    the client saw it, and nothing is appended after the end of the stream).
    """
    events = EventBuffer(limit)
    capture = None if remember is None else fmt.capture(limit)
    stored = False
    last = b""
    try:
        async for chunk in opened.chunks():
            piece = events.feed(chunk)
            if not piece:
                continue
            if capture is not None and capture.feed(piece):
                # Stored before the client sees the end: its next request sees this turn.
                stored = True
                if not await _store(capture, remember):
                    yield NOT_STORED
            last = piece
            yield piece
        # A clean end. An unterminated last event is passed on as it came: the bytes are the
        # upstream's, and they are all there is (docs/decisions.md).
        piece = events.close()
        if piece:
            if capture is not None:
                capture.feed(piece)
            yield piece
    except UPSTREAM_ERRORS as exc:
        log.warning("upstream stream broke off: %s", type(exc).__name__)
        if capture is None or not capture.done:
            # Only after an event too large to hold back (EventBuffer) can the client be
            # inside one: end it, or ours would merge into it.
            yield (b"\n\n" if events.mid_event else b"") + fmt.broken(exc, last)
        return
    finally:
        opened.close()
    if capture is not None and not stored and not await _store(capture, remember):
        yield NOT_STORED


async def _store(capture: Capture, remember: Remember | None) -> bool:
    """Hands a finished reply to `remember`; False only when storing it failed."""
    reply = capture.finish()
    if reply is not None and remember is not None:
        return await remember(reply)
    if capture.overflowed:
        log.warning("upstream stream larger than the capture limit: relayed, turn not stored")
    elif not capture.complete:
        log.warning("upstream stream ended before its reply was complete: turn not stored")
    return True


async def read_bounded(opened: Opened, limit: int) -> bytes | AsyncGenerator[bytes, None]:
    """The whole body if it fits in `limit` bytes; otherwise the body as a stream, read as it
    is relayed (the bytes read so far first), so it is never held whole, let alone twice.

    A failure before the body is whole is a 502 of ours; in the stream, `UpstreamBodyBroken`.
    The stream, once returned, owns `opened` (and closes it); otherwise it is closed here.
    """
    handed_over = False
    try:
        length = opened.content_length
        if length is not None and length <= limit:
            return await opened.read()
        chunks = opened.chunks()
        head: list[bytes] = []
        if length is None:
            size = 0
            try:
                async for chunk in chunks:
                    head.append(chunk)
                    size += len(chunk)
                    if size > limit:
                        break
                else:
                    return b"".join(head)
            except UPSTREAM_ERRORS as exc:
                raise opened.unavailable(exc) from None
        handed_over = True
        return _relay_body(opened, head, chunks)
    finally:
        if not handed_over:
            opened.close()


async def _relay_body(
    opened: Opened, head: list[bytes], chunks: AsyncIterator[bytes]
) -> AsyncGenerator[bytes, None]:
    try:
        if head:
            yield b"".join(head)
            head.clear()
        async for chunk in chunks:
            yield chunk
    except UPSTREAM_ERRORS as exc:
        log.warning("upstream body broke off: %s", type(exc).__name__)
        raise UpstreamBodyBroken(f"The upstream body broke off ({type(exc).__name__}).") from None
    finally:
        opened.close()
