"""One chat turn as every memory source sees it, and the reply it produced."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memory_bridge.core.messages import Message
from memory_bridge.tenancy.config import TokenConfig

DEFAULT_SESSION = "default"
TOKEN_WIDE_USER = ""


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memory a turn belongs to: the token id (never its secret), end user, session."""

    token_id: int
    user: str = TOKEN_WIDE_USER
    session: str = DEFAULT_SESSION


@dataclass(frozen=True, slots=True)
class Turn:
    request_id: str
    scope: Scope
    config: TokenConfig
    messages: tuple[Message, ...]
    query: str


@dataclass(frozen=True, slots=True)
class Reply:
    """What the upstream answered, as captured from a JSON body or an SSE stream."""

    content: str | None = None
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str | None = None
    usage: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def has_text(self) -> bool:
        return bool(self.content and self.content.strip())

    def as_message(self) -> Message:
        data: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            data["tool_calls"] = list(self.tool_calls)
        return Message.model_validate(data)
