"""The two wire formats a turn can come in: chat completions and the Responses API.

A turn goes through the same steps whichever it is (`chat.handler`); what differs is only
how its body is read, where its memory is written into it, where it is sent, and how the
reply is captured. Each format is one frozen value of `WireFormat`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memory_bridge.chat.capture import reply_from_json
from memory_bridge.chat.relay import CHAT_STREAM, StreamFormat
from memory_bridge.chat.request_body import parse_chat_body, parse_responses_body
from memory_bridge.chat.response_claims import Echo, echo_of
from memory_bridge.chat.responses_capture import RESPONSES_STREAM, reply_from_response_json
from memory_bridge.context.assemble import assemble, assemble_responses
from memory_bridge.context.template import MemoryTemplate
from memory_bridge.core.errors import invalid_request
from memory_bridge.core.messages import Message, MessageError, parse_messages
from memory_bridge.core.responses_items import input_messages
from memory_bridge.core.turn import Reply
from memory_bridge.sources.base import Recall
from memory_bridge.tenancy.forge_config import Placement

Body = dict[str, Any]


@dataclass(frozen=True, slots=True)
class WireFormat:
    """path: the upstream path under `/v1`. parse_body: the strict JSON parse (`request_body`).
    messages: the body's conversation as messages (a 422 `ProxyError` when unreadable).
    upstream_holds_history: does the upstream already hold this conversation (then no session
    history is injected). forward: the body with memory placed (in the token's layout), or None
    to forward it as is.
    reply_from_json: the reply in a whole (non-streaming) answer. stream: its event streams.
    echo: for a format whose replies echo the request and name a stored response (the
    Responses API), what of the forwarded body to take back out of them (`response_claims`);
    None: replies are relayed byte for byte."""

    name: str
    path: str
    items_key: str  # the body's list of messages or items (bounded: MAX_REQUEST_MESSAGES)
    parse_body: Callable[[bytes], Body]
    messages: Callable[[Body], tuple[Message, ...]]
    upstream_holds_history: Callable[[Body], bool]
    forward: Callable[
        [Body, tuple[Message, ...], list[Recall], MemoryTemplate, Placement], Body | None
    ]
    reply_from_json: Callable[[bytes], Reply | None]
    stream: StreamFormat
    echo: Callable[[Body, Body | None], Echo] | None = None


def _chat_messages(body: Body) -> tuple[Message, ...]:
    try:
        return parse_messages(body.get("messages"))
    except MessageError as exc:
        raise invalid_request(str(exc)) from None


def _chat_forward(
    body: Body,
    messages: tuple[Message, ...],
    recalls: list[Recall],
    template: MemoryTemplate,
    layout: Placement,
) -> Body | None:
    forwarded = assemble(body["messages"], messages, recalls, template, layout)
    return None if forwarded is None else {**body, "messages": forwarded}


CHAT = WireFormat(
    name="chat",
    path="chat/completions",
    items_key="messages",
    parse_body=parse_chat_body,
    messages=_chat_messages,
    upstream_holds_history=lambda _body: False,
    forward=_chat_forward,
    reply_from_json=reply_from_json,
    stream=CHAT_STREAM,
)


def _responses_messages(body: Body) -> tuple[Message, ...]:
    for key in ("instructions", "previous_response_id"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise invalid_request(f"'{key}' must be a string.")
    try:
        return input_messages(body.get("input"))
    except MessageError as exc:
        raise invalid_request(str(exc)) from None


def _responses_hold_history(body: Body) -> bool:
    # A previous response or a conversation object: the upstream replays that conversation
    # itself, so session history injected as well would be there twice.
    return body.get("previous_response_id") is not None or body.get("conversation") is not None


def _responses_forward(
    body: Body,
    _messages: tuple[Message, ...],
    recalls: list[Recall],
    template: MemoryTemplate,
    layout: Placement,
) -> Body | None:
    return assemble_responses(body, recalls, template, layout)


RESPONSES = WireFormat(
    name="responses",
    path="responses",
    items_key="input",
    parse_body=parse_responses_body,
    messages=_responses_messages,
    upstream_holds_history=_responses_hold_history,
    forward=_responses_forward,
    reply_from_json=reply_from_response_json,
    stream=RESPONSES_STREAM,
    echo=echo_of,
)
