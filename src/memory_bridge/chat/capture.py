"""Turn an upstream chat completion (a JSON body or an SSE stream) into a `Reply`.

Capture never raises on what the upstream sends: a malformed reply must not break the client's
response, it only means there is nothing to remember. Reasoning text (`reasoning_content`,
`reasoning`) reaches the client but is deliberately never captured, so it is never stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from memory_bridge.chat.sse import SSEEvent, SSEParser
from memory_bridge.core.turn import Reply

_DONE = "[DONE]"
# What a stream capture holds at most unless told otherwise (settings.max_upstream_body_bytes).
DEFAULT_LIMIT = 64 * 1024 * 1024


def _load_json(raw: str | bytes) -> object:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        # ValueError covers bad JSON and undecodable bytes; absurd nesting recurses instead.
        return None


@dataclass(slots=True)
class _ToolCallParts:
    id: str | None = None
    type: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def merge(self, fragment: dict[str, Any]) -> None:
        # Some upstreams repeat id/type in every fragment; the first one is authoritative.
        if self.id is None and isinstance(fragment.get("id"), str) and fragment["id"]:
            self.id = fragment["id"]
        if self.type is None and isinstance(fragment.get("type"), str) and fragment["type"]:
            self.type = fragment["type"]
        function = fragment.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        # Gemini-style upstreams split a name across fragments, others (MiniMax via NIM,
        # Anthropic-compatible gateways) resend the whole name each time: append unless it is
        # an exact repeat of what we already have.
        if isinstance(name, str) and name and name != self.name:
            self.name += name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            self.arguments.append(arguments)
        elif isinstance(arguments, dict) and not self.arguments:
            # Non-standard upstreams send the arguments as an object; store them as the JSON
            # string every client expects.
            self.arguments.append(json.dumps(arguments, ensure_ascii=False))

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id or "",
            "type": self.type or "function",
            "function": {"name": self.name, "arguments": "".join(self.arguments)},
        }


class StreamCapture:
    """Watches a chat.completion.chunk SSE stream and assembles choice 0's reply."""

    __slots__ = (
        "_content",
        "_done",
        "_errored",
        "_finish_reason",
        "_left",
        "_parser",
        "_tool_calls",
        "_usage",
    )

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._parser = SSEParser()
        # Bytes it may still take in; below zero it has stopped (`overflowed`).
        self._left = limit
        self._content: list[str] = []
        self._tool_calls: dict[int, _ToolCallParts] = {}
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._done = False
        self._errored = False

    @property
    def done(self) -> bool:
        return self._done

    @property
    def errored(self) -> bool:
        return self._errored

    @property
    def has_partial_line(self) -> bool:
        return self._parser.has_partial_line

    @property
    def complete(self) -> bool:
        """Did the upstream say the reply was over (`[DONE]`, or choice 0's finish_reason)?"""
        return self._done or self._finish_reason is not None

    @property
    def overflowed(self) -> bool:
        """Did the stream outgrow the limit? Then capture stopped, and there is no reply."""
        return self._left < 0

    def feed(self, chunk: bytes) -> bool:
        """Consume one read; True only for the read that completed the `[DONE]` event.

        The caller stores the turn before forwarding that read, so a client that disconnects
        as soon as it sees `[DONE]` cannot lose it.
        """
        if self._left < 0:
            return False
        self._left -= len(chunk)
        if self._left < 0:
            # Past the limit the reply is not stored anyway: stop holding its text.
            self._content.clear()
            self._tool_calls.clear()
            self._parser = SSEParser()
            return False
        was_done = self._done
        self._handle(self._parser.feed(chunk))
        return self._done and not was_done

    def finish(self) -> Reply | None:
        """The captured reply at end of stream; None if it is not one to remember.

        Not one to remember: an errored or overflowed stream, one without content or tool
        calls, and a truncated one — ended with neither `[DONE]` nor a finish_reason, so
        nothing says the reply is whole (an upstream that dies between events can close its
        response cleanly). Either marker alone is enough: some upstreams never send `[DONE]`,
        others (lone-CR or minimal servers) no finish_reason.
        """
        if self._left < 0:
            return None
        self._handle(self._parser.close())
        if self._errored or not self.complete:
            return None
        content = "".join(self._content) or None
        calls = tuple(self._tool_calls[i].as_dict() for i in sorted(self._tool_calls))
        if content is None and not calls:
            return None
        return Reply(
            content=content,
            tool_calls=calls,
            finish_reason=self._finish_reason,
            usage=self._usage,
        )

    def _handle(self, events: list[SSEEvent]) -> None:
        for event in events:
            if self._done:
                # Nothing after [DONE] is part of the reply (and the turn may already be stored).
                return
            if event.event == "error":
                self._errored = True
                continue
            if event.data.strip() == _DONE:
                self._done = True
                continue
            chunk = _load_json(event.data)
            if isinstance(chunk, dict):
                self._apply(chunk)

    def _apply(self, chunk: dict[str, Any]) -> None:
        if chunk.get("error") is not None:
            self._errored = True
            return
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._apply_choice(choice)

    def _apply_choice(self, choice: dict[str, Any]) -> None:
        finish_reason = choice.get("finish_reason")
        if isinstance(finish_reason, str):
            self._finish_reason = finish_reason
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        content = delta.get("content")
        if isinstance(content, str):
            self._content.append(content)
        fragments = delta.get("tool_calls")
        if isinstance(fragments, list):
            for fragment in fragments:
                if isinstance(fragment, dict):
                    self._merge_tool_call(fragment)

    def _merge_tool_call(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            # Index-less upstreams: a known id continues its call, an unseen id starts a new
            # one, and a fragment without an id continues the latest call.
            index = self._guess_index(fragment.get("id"))
        parts = self._tool_calls.get(index)
        if parts is None:
            parts = self._tool_calls[index] = _ToolCallParts()
        parts.merge(fragment)

    def _guess_index(self, frag_id: object) -> int:
        if frag_id:
            for index, parts in self._tool_calls.items():
                if parts.id == frag_id:
                    return index
        if frag_id or not self._tool_calls:
            return max(self._tool_calls, default=-1) + 1
        return max(self._tool_calls)


def reply_from_json(body: bytes) -> Reply | None:
    """The reply in a non-streaming chat.completion body; None when there is nothing usable."""
    payload = _load_json(body)
    if not isinstance(payload, dict):
        return None
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return None
    content = _text_of(message.get("content"))
    raw_calls = message.get("tool_calls")
    calls = (
        tuple(c for c in raw_calls if isinstance(c, dict)) if isinstance(raw_calls, list) else ()
    )
    if content is None and not calls:
        return None
    finish_reason = choices[0].get("finish_reason")
    usage = payload.get("usage")
    return Reply(
        content=content,
        tool_calls=calls,
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        usage=usage if isinstance(usage, dict) else None,
    )


def _text_of(content: object) -> str | None:
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        # Some upstreams answer with content parts; only their text is worth remembering.
        texts = [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        return "".join(texts) or None
    return None
