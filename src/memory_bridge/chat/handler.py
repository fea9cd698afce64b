"""One chat completion through the proxy: recall, assemble, forward, capture, remember."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx
from starlette.responses import Response

from memory_bridge.background import BackgroundWork
from memory_bridge.chat.capture import StreamCapture, reply_from_json
from memory_bridge.chat.responses import PassthroughStream
from memory_bridge.chat.upstream import Upstream, passthrough, response_headers
from memory_bridge.context.assemble import assemble
from memory_bridge.context.recall import recall_all
from memory_bridge.context.template import MemoryTemplate
from memory_bridge.errors import invalid_request
from memory_bridge.messages import MessageError, conversation, latest_user_text, parse_messages
from memory_bridge.sources.base import Exchange, MemorySource, Recall
from memory_bridge.tenancy.config import TokenConfig, config_secrets
from memory_bridge.turn import DEFAULT_SESSION, TOKEN_WIDE_USER, Reply, Scope, Turn

log = logging.getLogger(__name__)
T = TypeVar("T")
_MAX_ID = 200


@dataclass(frozen=True, slots=True)
class ChatRequest:
    request_id: str
    token_id: int
    config: TokenConfig
    body: bytes
    headers: Mapping[str, str]
    started: float  # perf_counter() when the request reached the proxy
    wait_disconnect: Callable[[], Awaitable[None]]


class ChatHandler:
    """Long-lived; holds no per-request state. Each call works on its own immutable Turn."""

    def __init__(
        self,
        sources: tuple[MemorySource, ...],
        upstream: Upstream,
        templates: Mapping[str, MemoryTemplate],
        background: BackgroundWork,
        store_timeout: float,
    ) -> None:
        self._sources = sources
        self._upstream = upstream
        self._templates = templates
        self._background = background
        self._store_timeout = store_timeout
        self._inline: set[asyncio.Task[None]] = set()

    async def handle(self, req: ChatRequest) -> Response:
        body = _parse_body(req.body)
        try:
            messages = parse_messages(body.get("messages"))
        except MessageError as exc:
            raise invalid_request(str(exc)) from None
        turn = Turn(
            request_id=req.request_id,
            scope=_scope(req.token_id, body, req.headers),
            config=req.config,
            messages=messages,
            query=latest_user_text(messages),
        )
        recalls = await recall_all(self._sources, turn)
        forwarded = assemble(
            body["messages"], messages, recalls, self._templates[turn.config.template]
        )
        payload = req.body
        if forwarded is not None:
            payload = json.dumps({**body, "messages": forwarded}, ensure_ascii=False).encode()
        headers = self._upstream.request_headers(turn.config, req.headers, json_body=True)
        diagnostics = _diagnostics(recalls, req.started)
        url = turn.config.chat_url()
        if body.get("stream") is True:
            opening = self._upstream.open("POST", url, headers, payload)
            return await self._stream(turn, recalls, opening, diagnostics, req.wait_disconnect)
        fetching = self._upstream.fetch("POST", url, headers, payload)
        return await self._complete(turn, recalls, fetching, diagnostics, req.wait_disconnect)

    async def _complete(
        self,
        turn: Turn,
        recalls: list[Recall],
        fetching: Awaitable[httpx.Response],
        diagnostics: list[tuple[bytes, bytes]],
        wait_disconnect: Callable[[], Awaitable[None]],
    ) -> Response:
        upstream = await _until_disconnect(fetching, wait_disconnect)
        if upstream.is_success:
            reply = reply_from_json(upstream.content)
            if reply is not None:
                await self._remember(turn, recalls, reply)
        return passthrough(upstream, upstream.content, diagnostics)

    async def _stream(
        self,
        turn: Turn,
        recalls: list[Recall],
        opening: Awaitable[httpx.Response],
        diagnostics: list[tuple[bytes, bytes]],
        wait_disconnect: Callable[[], Awaitable[None]],
    ) -> Response:
        upstream = await _until_disconnect(opening, wait_disconnect)
        content_type = upstream.headers.get("content-type", "")
        if not upstream.is_success or not content_type.startswith("text/event-stream"):
            try:
                content = await _until_disconnect(upstream.aread(), wait_disconnect)
            finally:
                await upstream.aclose()
            return passthrough(upstream, content, diagnostics)
        stream = PassthroughStream(
            self._relay(turn, recalls, upstream), status_code=upstream.status_code
        )
        stream.raw_headers = [
            *response_headers(upstream.headers),
            (b"x-accel-buffering", b"no"),
            *diagnostics,
        ]
        return stream

    async def _relay(
        self, turn: Turn, recalls: list[Recall], upstream: httpx.Response
    ) -> AsyncIterator[bytes]:
        """Pass the upstream's bytes on as they come, parsing a copy on the side."""
        capture = StreamCapture()
        remembered = False
        try:
            async for chunk in upstream.aiter_bytes():
                if capture.feed(chunk):
                    # Stored before the client sees [DONE]: its next request sees this turn.
                    remembered = True
                    reply = capture.finish()
                    if reply is not None:
                        await self._remember(turn, recalls, reply)
                yield chunk
        except httpx.HTTPError as exc:
            log.warning("upstream stream broke off: %s", type(exc).__name__)
            yield _stream_error(exc, capture.has_partial_line)
            return
        finally:
            with anyio.CancelScope(shield=True):
                await upstream.aclose()
        if not remembered:
            reply = capture.finish()
            if reply is not None:
                await self._remember(turn, recalls, reply)

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
        secrets = config_secrets(turn.config)
        for source in self._sources:
            if not source.remember_inline:
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


def _stream_error(exc: Exception, mid_line: bool) -> bytes:
    error = {
        "error": {
            "message": f"The upstream stream broke off ({type(exc).__name__}).",
            "type": "upstream_stream_error",
            "code": None,
        }
    }
    # A partial line from the upstream must be terminated, or our event would merge into it.
    lead = b"\n\n" if mid_line else b""
    return lead + b"data: " + json.dumps(error).encode() + b"\n\ndata: [DONE]\n\n"


async def _until_disconnect(
    work: Awaitable[T], wait_disconnect: Callable[[], Awaitable[None]]
) -> T:
    """Await `work`, abandoning it at once if the client disconnects meanwhile."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(wait_disconnect())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, watch):
            if not pending.done():
                pending.cancel()
        with suppress(asyncio.CancelledError):
            await watch
    if not task.done():
        with suppress(asyncio.CancelledError):
            await task
        raise ClientGone
    return task.result()


class ClientGone(Exception):
    """The client disconnected before the upstream answered; nobody is left to reply to."""
