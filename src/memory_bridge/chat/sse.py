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
