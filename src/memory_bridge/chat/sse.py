"""Incremental Server-Sent-Events parsing, run beside a byte-exact passthrough.

The proxy forwards upstream bytes unchanged; this parser only watches them. Network reads split
lines anywhere (even inside a UTF-8 character, or between the CR and LF of a CRLF), so bytes are
buffered until a line terminator arrives and only whole lines are decoded. Field handling
follows the WHATWG event-stream rules, minus `id`/`retry`, which a capture has no use for.
"""

from __future__ import annotations

from dataclasses import dataclass

_BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: str
    event: str | None = None


class SSEParser:
    """Feed raw chunks in arrival order; get back the events each chunk completed."""

    __slots__ = ("_at_start", "_data", "_event", "_pending", "_skip_lf")

    def __init__(self) -> None:
        self._pending = bytearray()
        # A chunk ending in CR cannot tell yet whether it was a lone CR or half of a CRLF; the
        # line is terminated either way, and an LF opening the next chunk is then swallowed
        # rather than read as an (event-dispatching) empty line.
        self._skip_lf = False
        self._at_start = True
        self._data: list[str] = []
        self._event: str | None = None

    @property
    def has_partial_line(self) -> bool:
        return bool(self._pending)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
        if not chunk:
            return []
        # The pending bytes hold no terminator, so only the new chunk needs searching; this keeps
        # a long line arriving in many small reads linear instead of quadratic.
        end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if end < 0:
            self._pending += chunk
            return []
        if self._pending:
            block = bytes(self._pending) + chunk[: end + 1]
            self._pending.clear()
        else:
            block = chunk[: end + 1]
        self._pending += chunk[end + 1 :]
        self._skip_lf = end == len(chunk) - 1 and chunk[end] == 0x0D
        return self._lines(block.decode("utf-8", errors="replace"), terminated=True)

    def close(self) -> list[SSEEvent]:
        """Flush at end of stream; the parser is then ready for a new stream.

        Unlike a browser, which drops an event the server never terminated, this dispatches it:
        an upstream that dies after its last `data:` line still said what it said. A final
        line without a terminator counts too (a truncated JSON line fails to parse later).
        """
        events: list[SSEEvent] = []
        if self._pending:
            text = self._pending.decode("utf-8", errors="replace")
            self._pending.clear()
            events = self._lines(text, terminated=False)
        if self._data:
            events.append(self._dispatch())
        self._data = []
        self._event = None
        self._skip_lf = False
        self._at_start = True
        return events

    def _lines(self, text: str, *, terminated: bool) -> list[SSEEvent]:
        if self._at_start:
            self._at_start = False
            if text.startswith(_BOM):
                text = text[1:]
        # One decode per block then str splitting is much cheaper than per-line decoding, and
        # equivalent: an invalid UTF-8 sequence can never swallow an ASCII CR or LF.
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        if terminated:
            lines.pop()  # the empty remainder after the block's final terminator
        events: list[SSEEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(self._dispatch())
                self._event = None
                continue
            if line[0] == ":":
                continue
            name, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value or None
        return events

    def _dispatch(self) -> SSEEvent:
        event = SSEEvent("\n".join(self._data), self._event)
        self._data = []
        return event


class EventBuffer:
    """Cuts a byte stream at SSE event boundaries, so the relay forwards whole events only.

    The bytes are never changed, only held back: `feed` returns everything up to the last blank
    line seen so far (an event's end) and keeps the rest until its boundary arrives. A client
    whose upstream broke off then never holds half an event, so the in-band error that follows
    is an event of its own (after half a one it would merge into invalid JSON).

    A blank line is a line terminator right after another: `\\n\\n`, `\\r\\r` or `\\n\\r` (which
    the `\\r\\n\\r\\n` of CRLF streams contains). A cut after a CR takes the LF after it along when
    that is already there, so a CRLF is split only where the upstream's read split it; the LF
    then opens the next piece, which every event-stream parser reads the same way.
    """

    __slots__ = ("_last", "_limit", "_mid_event", "_pending")

    def __init__(self, limit: int) -> None:
        # The bytes after the last boundary. They never hold a whole boundary (they would have
        # been cut there), so a new read is searched together with one byte before it only:
        # the last pending byte, or else the last byte handed on (`_last`).
        self._pending = bytearray()
        self._last = -1
        self._limit = limit
        self._mid_event = False

    @property
    def mid_event(self) -> bool:
        """True when what was handed out so far does not end at an event boundary."""
        return self._mid_event

    def feed(self, chunk: bytes) -> bytes:
        """The whole events this read completed (after any held-back start of them), or b""."""
        pending = self._pending
        if not pending:
            # The usual read is one or more whole events: handed on as it is, without a copy.
            if chunk.endswith(b"\n\n"):
                self._mid_event = False
                self._last = 0x0A
                return chunk
            end = _last_boundary(chunk, 0)
            if end < 0:
                end = self._boundary_at_start(chunk)
                if end < 0:
                    return self._hold(chunk)
            self._mid_event = False
            if end == len(chunk):
                self._last = chunk[-1]
                return chunk
            pending += memoryview(chunk)[end:]
            self._last = chunk[end - 1]
            return chunk[:end]
        start = len(pending) - 1
        pending += chunk
        end = _last_boundary(pending, start)
        if end < 0:
            return self._hold(b"")
        self._mid_event = False
        whole = bytes(memoryview(pending)[:end])
        del pending[:end]
        self._last = whole[-1]
        return whole

    def close(self) -> bytes:
        """What is left at the end of the stream: an unterminated last event, or nothing."""
        rest = bytes(self._pending)
        self._pending.clear()
        return rest

    def _boundary_at_start(self, chunk: bytes) -> int:
        """The end of a blank line that the read's first byte makes with the last one handed
        on (a line terminator): LF then LF or CR, or CR then CR. CR then LF is one CRLF."""
        if not chunk:
            return -1
        first = chunk[0]
        if (self._last == 0x0A and first in _EOL) or (self._last == first == 0x0D):
            return 2 if first == 0x0D and chunk[1:2] == b"\n" else 1
        return -1

    def _hold(self, chunk: bytes) -> bytes:
        self._pending += chunk
        if len(self._pending) <= self._limit:
            return b""
        # An event this large is of no use to a client either; rather than hold it without
        # bound, it is passed on as it comes (and the whole-event promise is off for it).
        self._mid_event = True
        rest = self.close()
        self._last = rest[-1]
        return rest


_EOL = b"\r\n"


def _last_boundary(buf: bytes | bytearray, start: int) -> int:
    """The end of the last blank line in `buf[start:]`, or -1. Three C-level scans of the new
    bytes: cheaper than a regular expression or a loop over lines."""
    end = max(buf.rfind(b"\n\n", start), buf.rfind(b"\r\r", start), buf.rfind(b"\n\r", start))
    if end < 0:
        return -1
    end += 2
    if buf[end - 1] == 0x0D and end < len(buf) and buf[end] == 0x0A:
        end += 1  # the LF of a CRLF
    return end
