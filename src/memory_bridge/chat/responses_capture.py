"""Turn an upstream Responses API answer (a response object or its event stream) into a `Reply`.

As for chat completions, capture never raises on what the upstream sends, and reasoning items
reach the client but are never captured. A response counts as a turn when it ended normally:
status `completed`, or `incomplete` (cut by a limit, as a chat completion's `length`); the
stream's final event (`response.completed` / `response.incomplete`) carries the whole response,
and the deltas before it are the fallback for upstreams whose final event omits the output.
"""

from __future__ import annotations

import json
import re
from typing import Any

from memory_bridge.chat.capture import DEFAULT_LIMIT
from memory_bridge.chat.relay import StreamFormat
from memory_bridge.chat.sse import SSEEvent, SSEParser
from memory_bridge.core.responses_items import FUNCTION_CALL, MESSAGE, output_run
from memory_bridge.core.turn import Reply

_FINAL = frozenset({"response.completed", "response.incomplete"})
_FAILED = frozenset({"response.failed", "error"})
_ITEM = frozenset({"response.output_item.added", "response.output_item.done"})
_TEXT_DELTA = "response.output_text.delta"
_ARGS_DELTA = "response.function_call_arguments.delta"
_ARGS_DONE = "response.function_call_arguments.done"
# The events whose data the capture reads; the others (reasoning, content parts, the opening
# response.created with its copy of the request) are not even parsed.
_WANTED = _FINAL | _FAILED | _ITEM | {_TEXT_DELTA, _ARGS_DELTA, _ARGS_DONE}
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d+)')


def _load(raw: str | bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def reply_from_response(response: dict[str, Any]) -> Reply | None:
    """The reply in a response object; None unless it ended normally with text or calls."""
    status = response.get("status", "completed")  # a minimal upstream may leave it out
    output = response.get("output")
    if status not in ("completed", "incomplete") or not isinstance(output, list):
        return None
    return _reply(output, response)


def reply_from_response_json(body: bytes) -> Reply | None:
    """The reply in a non-streaming Responses body."""
    payload = _load(body)
    return None if payload is None else reply_from_response(payload)


def _reply(output: list[Any], response: dict[str, Any]) -> Reply | None:
    run = output_run(output)
    if not run:
        return None
    usage = response.get("usage")
    return Reply(
        content=run.content,
        tool_calls=tuple(run.calls),
        finish_reason=_finish_reason(response, bool(run.calls)),
        usage=usage if isinstance(usage, dict) else None,
    )


def _finish_reason(response: dict[str, Any], calls: bool) -> str:
    """The chat completions word for how it ended, so a session's turns read alike."""
    if response.get("status", "completed") == "completed":
        return "tool_calls" if calls else "stop"
    details = response.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    return {"max_output_tokens": "length", "content_filter": "content_filter"}.get(
        str(reason), "incomplete"
    )


class ResponsesStreamCapture:
    """Watches a Responses event stream and assembles the reply (see `relay.Capture`)."""

    __slots__ = ("_args", "_done", "_errored", "_final", "_items", "_left", "_parser", "_texts")

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._parser = SSEParser()
        self._left = limit
        self._items: dict[int, dict[str, Any]] = {}  # output_index -> the item as last seen
        self._texts: dict[int, list[str]] = {}
        self._args: dict[int, list[str]] = {}
        self._final: dict[str, Any] | None = None
        self._done = False
        self._errored = False

    @property
    def done(self) -> bool:
        return self._done

    @property
    def errored(self) -> bool:
        return self._errored

    @property
    def complete(self) -> bool:
        return self._final is not None and not self._errored

    @property
    def overflowed(self) -> bool:
        return self._left < 0

    def feed(self, chunk: bytes) -> bool:
        if self._left < 0:
            return False
        self._left -= len(chunk)
        if self._left < 0:
            # Past the limit the reply is not stored anyway: stop holding its parts.
            self._items.clear()
            self._texts.clear()
            self._args.clear()
            self._final = None
            self._parser = SSEParser()
            return False
        was_done = self._done
        self._handle(self._parser.feed(chunk))
        return self._done and not was_done

    def finish(self) -> Reply | None:
        if self._left < 0:
            return None
        self._handle(self._parser.close())
        final = self._final
        if final is None or self._errored:
            return None
        output = final.get("output")
        reply = _reply(output, final) if isinstance(output, list) else None
        return reply if reply is not None else _reply(self._streamed_output(), final)

    def _handle(self, events: list[SSEEvent]) -> None:
        for event in events:
            if self._done:
                return  # nothing after the final event is part of the reply
            if event.event is not None and event.event not in _WANTED:
                continue
            data = _load(event.data)
            if data is None:
                continue
            kind = data.get("type", event.event)
            if kind in _FINAL:
                response = data.get("response")
                self._final = response if isinstance(response, dict) else {"status": "completed"}
                if kind == "response.incomplete":
                    self._final.setdefault("status", "incomplete")
                self._done = True
            elif kind in _FAILED:
                self._errored = True
                self._done = kind == "response.failed"
            else:
                self._apply(kind, data)

    def _apply(self, kind: object, data: dict[str, Any]) -> None:
        index = data.get("output_index", 0)
        if not isinstance(index, int):
            return
        if kind in _ITEM:
            item = data.get("item")
            if isinstance(item, dict):
                self._items[index] = item
        elif kind == _TEXT_DELTA and isinstance(data.get("delta"), str):
            self._texts.setdefault(index, []).append(data["delta"])
        elif kind == _ARGS_DELTA and isinstance(data.get("delta"), str):
            self._args.setdefault(index, []).append(data["delta"])
        elif kind == _ARGS_DONE and isinstance(data.get("arguments"), str):
            self._args[index] = [data["arguments"]]

    def _streamed_output(self) -> list[dict[str, Any]]:
        """The output as the events before the final one described it."""
        output: list[dict[str, Any]] = []
        for index in sorted(self._items.keys() | self._texts.keys() | self._args.keys()):
            item = self._items.get(index, {})
            kind = item.get("type", FUNCTION_CALL if index in self._args else MESSAGE)
            if kind == MESSAGE and not item.get("content") and index in self._texts:
                text = "".join(self._texts[index])
                item = {**item, "type": MESSAGE, "content": [{"type": "output_text", "text": text}]}
            elif kind == FUNCTION_CALL and index in self._args:
                item = {**item, "type": FUNCTION_CALL, "arguments": "".join(self._args[index])}
            output.append(item)
        return output


def responses_stream_error(exc: Exception, last: bytes) -> bytes:
    """The `error` event that ends a Responses stream the upstream broke off.

    Its fields are the documented event's (`code`, `message`, `param`, `sequence_number`, the
    one after the last relayed) plus the nested `error` object OpenAI's service sends, which
    is what the openai SDK raises as an `APIError`. Never a made-up `response.completed`.
    """
    message = f"The upstream stream broke off ({type(exc).__name__})."
    error = {"type": "upstream_stream_error", "code": "upstream_stream_error", "message": message}
    found = _SEQUENCE.findall(last)
    event = {
        "type": "error",
        "code": error["code"],
        "message": message,
        "param": None,
        "sequence_number": int(found[-1]) + 1 if found else 0,
        "error": {**error, "param": None},
    }
    return b"event: error\ndata: " + json.dumps(event).encode() + b"\n\n"


RESPONSES_STREAM = StreamFormat(ResponsesStreamCapture, responses_stream_error)
