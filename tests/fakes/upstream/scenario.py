"""What a test scripts: a `Scenario` per answer (and its `ToolCall`s), plus the text helpers every
API's builder shares (word-sized deltas, argument fragments, the default reply)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_REPLY = "Hello from upstream"
DEFAULT_MODEL = "gpt-4o-mini"


@dataclass(frozen=True)
class ToolCall:
    """A function tool call the fake model "makes". ``arguments`` may be a JSON string or a
    mapping (serialised compactly). ``id`` defaults to ``call_fake<n>``."""

    name: str
    arguments: str | Mapping[str, Any] = "{}"
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Scenario:
    """Script for one chat completion or response.

    Content
      ``content``: the reply text; a string is streamed in word-sized deltas, a sequence of
      strings gives the exact deltas. ``None`` means ``DEFAULT_REPLY`` unless there are tool
      calls. ``reasoning``: ``reasoning_content`` (DeepSeek style), streamed before content.
      ``tool_calls``: streamed OpenAI-style, finish_reason becomes "tool_calls".
      ``finish_reason`` / ``usage`` / ``id``: override the defaults.

    Failure and transport shaping
      ``status`` != 200: reply with that status and ``error_body`` (JSON-able, or raw bytes;
      default: an OpenAI error object), for stream and non-stream requests alike.
      ``headers``: extra response headers. ``delay``: seconds before responding (abandonment
      by the client during the delay is counted in ``FakeUpstream.cancelled``).

    Streaming only
      ``chunk_size``: re-cut the SSE body into pieces of N bytes (splitting lines and UTF-8
      characters), each sent as its own write. By default each SSE event is one piece.
      ``chunk_delay``: seconds to sleep between pieces.
      ``disconnect_after_chunks``: after N pieces, abort the connection (the client sees an
      incomplete chunked body, i.e. ``httpx.RemoteProtocolError``).
      ``omit_done``: leave out ``data: [DONE]`` (Responses: the final ``response.completed``).
      ``raw_sse``: send exactly these bytes as the body instead of generated events (one
      piece, unless ``chunk_size`` is set).
      ``FakeUpstream.sent_bytes`` gets each streamed body as planned before sending: the
      whole body, or the first N pieces with ``disconnect_after_chunks`` (a client that hangs
      up early simply receives less).

    Responses API only
      ``response_status``: how the response ends: "completed" (default), "incomplete"
      (``max_output_tokens``), or "failed" (``response.failed``, no output).
      ``bare_completed``: the final event's response carries an empty ``output`` (as some
      upstreams send it), so a capture has to use the deltas.
      ``echo_input``: the response object echoes the request's ``input`` too (as some
      OpenAI-compatible servers do; OpenAI echoes only ``instructions``).

    Non-streaming shaping (``FakeUpstream.sent_bytes`` gets the JSON body as planned, as above)
      ``chunked_json``: send the JSON body without Content-Length (chunked), cut into
      ``chunk_size`` pieces (one piece by default); ``disconnect_after_chunks`` breaks it off.
      ``gzip_json``: send the JSON body gzip-compressed (Content-Encoding: gzip), with the
      compressed length as Content-Length.
    """

    content: str | Sequence[str] | None = None
    tool_calls: Sequence[ToolCall] = ()
    reasoning: str | Sequence[str] | None = None
    finish_reason: str | None = None
    usage: Mapping[str, int] | None = None
    id: str | None = None
    status: int = 200
    error_body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunk_size: int | None = None
    chunk_delay: float = 0.0
    disconnect_after_chunks: int | None = None
    omit_done: bool = False
    raw_sse: bytes | None = None
    chunked_json: bool = False
    gzip_json: bool = False
    response_status: str | None = None
    bare_completed: bool = False
    echo_input: bool = False


def content_of(scenario: Scenario) -> str | Sequence[str] | None:
    """The reply text: ``DEFAULT_REPLY`` when the scenario says neither content nor calls."""
    if scenario.content is None and not scenario.tool_calls:
        return DEFAULT_REPLY
    return scenario.content


def call_id(call: ToolCall, index: int) -> str:
    return call.id or f"call_fake{index}"


def deltas(text: str | Sequence[str] | None) -> list[str]:
    """Split text into word-sized deltas ("Hello from x" -> ["Hello ", "from ", "x"])."""
    if text is None:
        return []
    if isinstance(text, str):
        return re.findall(r"\S+\s*|\s+", text)
    return list(text)


def fragments(arguments: str, size: int = 8) -> list[str]:
    """A call's arguments as the streamed pieces (and, one piece a token, its usage)."""
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def generated_tokens(scenario: Scenario) -> int:
    """The completion's token count as both APIs' usage reports it: one per delta."""
    count = len(deltas(content_of(scenario))) + len(deltas(scenario.reasoning))
    return count + sum(len(fragments(c.arguments_json())) for c in scenario.tool_calls)
