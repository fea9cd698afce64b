"""The one message model, and the checks a chat request's `messages` must pass.

`Message` keeps unknown fields (`extra="allow"`) so vendor extensions on a message reach the
upstream unchanged. Conversion to and from plain dicts happens only at the edges.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError, field_validator

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
SYSTEM_ROLES: frozenset[str] = frozenset({"system", "developer"})
STORED_ROLES: frozenset[str] = frozenset({"user", "assistant", "tool"})

Content = StrictStr | list[dict[str, Any]] | None


class MessageError(ValueError):
    """A request's messages are malformed; the text names the offending message and field."""


class Message(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    role: Role
    content: Content = None
    name: StrictStr | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: StrictStr | None = None

    @field_validator("content")
    @classmethod
    def _parts_have_types(cls, value: Content) -> Content:
        if isinstance(value, list):
            for part in value:
                if not isinstance(part.get("type"), str):
                    raise ValueError("every content part needs a string 'type'")
        return value

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True, exclude_none=False)

    def text(self) -> str:
        """The message's plain text: the string content, or its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        if isinstance(self.content, list):
            return "\n".join(
                str(p.get("text", "")) for p in self.content if p.get("type") == "text"
            )
        return ""

    def identity(self) -> str:
        """A digest of what makes two messages "the same" when a client resends them.

        Formatting the SDKs change on the way back (an empty content vs null, extra keys on a
        tool call) is ignored so a resent conversation matches what was stored.
        """
        calls = [
            (
                c.get("id"),
                (c.get("function") or {}).get("name"),
                (c.get("function") or {}).get("arguments"),
            )
            for c in self.tool_calls or []
        ]
        key = [self.role, self.content or None, self.name, calls, self.tool_call_id]
        raw = json.dumps(key, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(raw.encode()).hexdigest()


def parse_messages(raw: object) -> tuple[Message, ...]:
    """Validate a request body's `messages`; raise MessageError naming what is wrong."""
    if not isinstance(raw, list) or not raw:
        raise MessageError("'messages' must be a non-empty array")
    parsed: list[Message] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise MessageError(f"messages[{i}] must be an object")
        try:
            msg = Message.model_validate(item)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"][:1]) or "message"
            raise MessageError(f"messages[{i}].{field}: {err['msg']}") from None
        _check_roles(i, msg)
        parsed.append(msg)
    return tuple(parsed)


def _check_roles(i: int, msg: Message) -> None:
    if msg.role == "tool" and not msg.tool_call_id:
        raise MessageError(f"messages[{i}].tool_call_id: required for role 'tool'")
    if msg.content is None and msg.role != "assistant":
        raise MessageError(f"messages[{i}].content: required for role '{msg.role}'")
    calls = msg.tool_calls or "function_call" in (msg.model_extra or {})
    if msg.role == "assistant" and msg.content is None and not calls:
        raise MessageError(
            f"messages[{i}].content: an assistant message needs content or tool_calls"
        )


def conversation(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """The messages that belong to the stored conversation: everything but system prompts."""
    return tuple(m for m in messages if m.role not in SYSTEM_ROLES)


def latest_user_text(messages: tuple[Message, ...]) -> str:
    """The memory query: the newest user message's text (a tool result is not a query)."""
    for msg in reversed(messages):
        if msg.role == "user":
            text = msg.text().strip()
            if text:
                return text
    return ""
