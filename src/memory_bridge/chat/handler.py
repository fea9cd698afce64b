"""One chat completion through the proxy: recall, assemble, forward, capture, remember."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from memory_bridge.background import BackgroundWork
from memory_bridge.chat.capture import DEFAULT_LIMIT, reply_from_json
from memory_bridge.chat.relay import is_sse, read_bounded, relay_events, stream_headers
from memory_bridge.chat.upstream import Opened, Upstream
from memory_bridge.context.assemble import assemble
from memory_bridge.context.recall import recall_all
from memory_bridge.context.template import MemoryTemplate
from memory_bridge.errors import invalid_request
from memory_bridge.messages import MessageError, conversation, latest_user_text, parse_messages
from memory_bridge.sources.base import Exchange, MemorySource, Recall
from memory_bridge.tenancy.config import TokenConfig, config_secrets
from memory_bridge.turn import DEFAULT_SESSION, TOKEN_WIDE_USER, Reply, Scope, Turn

log = logging.getLogger(__name__)
_MAX_ID = 200


@dataclass(frozen=True, slots=True)
class ChatRequest:
    request_id: str
    token_id: int
    config: TokenConfig
    body: bytes
    headers: Mapping[str, str]  # lower-case names
    started: float  # perf_counter() when the request reached the proxy


@dataclass(frozen=True, slots=True)
class Outgoing:
    """The response for our client: a whole body, or a stream of bytes to relay as they come.

    Whoever sends it must exhaust or `aclose()` the stream (which releases the upstream).
    """

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes = b""
    stream: AsyncGenerator[bytes, None] | None = None


class ChatHandler:
    """Long-lived; holds no per-request state. Each call works on its own immutable Turn."""

    def __init__(
        self,
        sources: tuple[MemorySource, ...],
        upstream: Upstream,
        templates: Mapping[str, MemoryTemplate],
        background: BackgroundWork,
        store_timeout: float,
        *,
        max_upstream_body: int = DEFAULT_LIMIT,
    ) -> None:
        self._sources = sources
        self._upstream = upstream
        self._templates = templates
        self._background = background
        self._store_timeout = store_timeout
        # The most of an upstream answer held to parse it; larger ones are relayed unparsed.
        self._max_body = max_upstream_body
        self._inline: set[asyncio.Task[None]] = set()

    async def handle(self, req: ChatRequest) -> Outgoing:
        """Answer one chat completion. A client that disconnects cancels the calling task;
        the upstream request is abandoned then, but a turn being stored is not."""
        body = _parse_body(req.body)
        scope = _scope(req.token_id, body, req.headers)
        config = req.config
        headers = self._upstream.request_headers(config, req.headers, json_body=True)
        streaming = body.get("stream") is True
        if config.memory_config.passthrough:
            # No layer to feed or fill: the client's bytes go upstream, nothing is captured.
            diagnostics = _diagnostics([], req.started)
            opened = await self._upstream.open("POST", config.chat_url(), headers, req.body)
            if streaming and is_sse(opened):
                stream = relay_events(opened, self._max_body)
                return Outgoing(opened.status, stream_headers(opened, diagnostics), stream=stream)
            return _whole(opened, diagnostics, await read_bounded(opened, self._max_body))
        try:
            messages = parse_messages(body.get("messages"))
        except MessageError as exc:
            raise invalid_request(str(exc)) from None
        turn = Turn(
            request_id=req.request_id,
            scope=scope,
            config=config,
            messages=messages,
            query=latest_user_text(messages),
        )
        recalls = await recall_all(self._sources, turn)
        forwarded = assemble(body["messages"], messages, recalls, self._templates[config.template])
        payload = req.body
        if forwarded is not None:
            payload = json.dumps({**body, "messages": forwarded}, ensure_ascii=False).encode()
        diagnostics = _diagnostics(recalls, req.started)
        opened = await self._upstream.open("POST", config.chat_url(), headers, payload)
        if streaming and opened.ok and is_sse(opened):
            stream = relay_events(opened, self._max_body, partial(self._remember, turn, recalls))
            return Outgoing(opened.status, stream_headers(opened, diagnostics), stream=stream)
        # An error, a JSON reply, or a non-SSE answer to a streaming request (not stored).
        answer = await read_bounded(opened, self._max_body)
        if opened.ok and not streaming:
            if isinstance(answer, bytes):
                reply = reply_from_json(answer)
                if reply is not None:
                    await self._remember(turn, recalls, reply)
            else:
                log.warning(
                    "upstream reply larger than %d bytes: relayed, turn not stored", self._max_body
                )
        return _whole(opened, diagnostics, answer)

    async def _remember(self, turn: Turn, recalls: list[Recall], reply: Reply) -> None:
        prefix = max((r.stored_prefix for r in recalls), default=0)
        exchange = Exchange(
            turn=turn, new_messages=conversation(turn.messages)[prefix:], reply=reply
        )
        # Shielded: a client that leaves after the last byte must not lose its turn.
        task = asyncio.create_task(self._remember_inline(exchange))
        self._inline.add(task)
        task.add_done_callback(self._inline.discard)
        await asyncio.shield(task)
        secrets: tuple[str, ...] | None = None
        for source in self._sources:
            if not source.remember_inline:
                if secrets is None:
                    secrets = config_secrets(turn.config)
                self._background.submit(
                    f"{source.name}.remember",
                    source.remember(exchange),
                    timeout=self._store_timeout,
                    secrets=secrets,
                )

    async def _remember_inline(self, exchange: Exchange) -> None:
        for source in self._sources:
            if source.remember_inline:
                try:
                    await source.remember(exchange)
                except Exception as exc:
                    log.error("storing the turn in %s failed: %s", source.name, type(exc).__name__)


def _whole(
    opened: Opened,
    diagnostics: list[tuple[bytes, bytes]],
    body: bytes | AsyncGenerator[bytes, None],
) -> Outgoing:
    """A response that is not an event stream: one body, or one too large to hold, streamed."""
    headers = [*opened.headers, *diagnostics]
    if isinstance(body, bytes):
        return Outgoing(opened.status, headers, body)
    return Outgoing(opened.status, headers, stream=body)


def _parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise invalid_request("The request body is not valid JSON.", 400) from None
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", 400)
    return body


def _scope(token_id: int, body: dict[str, Any], headers: Mapping[str, str]) -> Scope:
    user = body.get("user")
    if user is None:
        user = headers.get("x-user-id", TOKEN_WIDE_USER)
    elif not isinstance(user, str):
        raise invalid_request("'user' must be a string.")
    session = headers.get("x-session-id", DEFAULT_SESSION) or DEFAULT_SESSION
    for label, value in (("user", user), ("X-Session-Id", session)):
        if len(value) > _MAX_ID or not value.isprintable():
            raise invalid_request(f"{label} must be at most {_MAX_ID} printable characters.")
    return Scope(token_id=token_id, user=user, session=session)


def _diagnostics(recalls: list[Recall], started: float) -> list[tuple[bytes, bytes]]:
    overhead = (time.perf_counter() - started) * 1000
    injected = ", ".join(f"{r.source}={r.injected}" for r in recalls)
    return [
        (b"x-memorybridge-overhead-ms", f"{overhead:.2f}".encode()),
        (b"x-memorybridge-injected", injected.encode()),
    ]
