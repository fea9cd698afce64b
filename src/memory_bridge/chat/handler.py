"""One turn through the proxy: recall, assemble, forward, capture, remember.

A turn comes as a chat completion or as a Responses API request (`chat.formats`); the steps
and the failure policy are the same for both.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from memory_bridge.chat.capture import DEFAULT_LIMIT
from memory_bridge.chat.formats import CHAT, WireFormat
from memory_bridge.chat.relay import is_sse, read_bounded, relay_events, stream_headers
from memory_bridge.chat.upstream import Opened, Upstream
from memory_bridge.context.forge.intent import Intent, classify, ranking_for
from memory_bridge.context.forge.pipeline import forge
from memory_bridge.context.recall import recall_all
from memory_bridge.context.template import MemoryTemplate
from memory_bridge.core.errors import invalid_request
from memory_bridge.core.message_bounds import bounded
from memory_bridge.core.messages import conversation, latest_user_text
from memory_bridge.core.token_count import count_tokens
from memory_bridge.core.turn import DEFAULT_SESSION, TOKEN_WIDE_USER, Reply, Scope, Turn
from memory_bridge.events.recorder import TurnRecorder
from memory_bridge.sources.base import MemorySource, Recall
from memory_bridge.storage.audit import AuditLog
from memory_bridge.storage.health import StorageHealth
from memory_bridge.storage.traces import TraceStore
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.tenancy.forge_config import ForgeConfig
from memory_bridge.tenancy.ranking import Ranking

log = logging.getLogger(__name__)
_MAX_ID = 200
# On a response whose turn the database refused (a stream says so in-band: relay.NOT_STORED).
NOT_STORED_HEADER = (b"x-memorybridge-stored", b"false")
_RULES_MEMO = 1024  # distinct `memory.forge` configs whose rules are kept built


@dataclass(frozen=True, slots=True)
class ChatRequest:
    request_id: str
    token_id: int
    config: TokenConfig
    body: bytes
    headers: Mapping[str, str]  # lower-case names
    started: float  # perf_counter() when the request reached the proxy
    wire: WireFormat = field(default=CHAT)


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
        recorder: TurnRecorder,
        health: StorageHealth,
        audit: AuditLog,
        *,
        max_upstream_body: int = DEFAULT_LIMIT,
        ranking: Ranking | None = None,
        traces: TraceStore | None = None,
    ) -> None:
        self._sources = sources
        self._upstream = upstream
        self._templates = templates
        self._recorder = recorder
        self._health = health
        self._audit = audit
        # The most of an upstream answer held to parse it; larger ones are relayed unparsed.
        self._max_body = max_upstream_body
        self._inline: set[asyncio.Task[object]] = set()
        self._ranking = ranking or Ranking()
        self._token_rules: dict[tuple[ForgeConfig | None, Intent], Ranking] = {}
        self._traces = traces

    async def handle(self, req: ChatRequest) -> Outgoing:
        """Answer one turn. A client that disconnects cancels the calling task; the upstream
        request is abandoned then, but a turn being stored is not."""
        wire = req.wire
        body = wire.parse_body(req.body)
        scope = _scope(req.token_id, body, req.headers)
        config = req.config
        headers = self._upstream.request_headers(config, req.headers, json_body=True)
        streaming = body.get("stream") is True
        url = config.api_url(wire.path)
        if config.memory_config.passthrough:
            # No layer to feed or fill: the client's bytes go upstream, nothing is captured.
            diagnostics = _diagnostics([], req.started)
            opened = await self._upstream.open("POST", url, headers, req.body)
            if streaming and is_sse(opened):
                stream = relay_events(opened, self._max_body, fmt=wire.stream)
                return Outgoing(opened.status, stream_headers(opened, diagnostics), stream=stream)
            return _whole(opened, diagnostics, await read_bounded(opened, self._max_body))
        messages = wire.messages(body)
        turn = Turn(
            request_id=req.request_id,
            scope=scope,
            config=config,
            messages=messages,
            query=latest_user_text(messages),
        )
        recalls = await recall_all(self._sources, turn)
        if wire.upstream_holds_history(body):
            # Still recalled: the history source also tells what of the request is stored.
            recalls = [replace(r, history=()) if r.history else r for r in recalls]
        memory = config.memory_config
        intent = classify(turn.query)
        rules = self._rules_for(memory.forge, intent)
        forged = forge(recalls, messages, rules, count_tokens, time.time(), intent)
        recalls = forged.recalls
        limit = self._recorder.max_message_bytes
        cut = sum(1 for m in conversation(messages) if bounded(m, limit) is not m)
        if cut:  # these will be stored shortened (MAX_STORED_MESSAGE_BYTES, placeholders)
            forged.trace["stored_shortened"] = cut
        self._keep_trace(turn, forged.trace)
        template = self._templates[config.template]
        forwarded = wire.forward(body, messages, recalls, template, memory.placement)
        payload = req.body
        if forwarded is not None:
            payload = json.dumps(forwarded, ensure_ascii=False).encode()
        diagnostics = _diagnostics(recalls, req.started)
        opened = await self._upstream.open("POST", url, headers, payload)
        if streaming and opened.ok and is_sse(opened):
            remember = partial(self._remember, turn, recalls)
            stream = relay_events(opened, self._max_body, remember, wire.stream)
            return Outgoing(opened.status, stream_headers(opened, diagnostics), stream=stream)
        # An error, a JSON reply, or a non-SSE answer to a streaming request (not stored).
        answer = await read_bounded(opened, self._max_body)
        if opened.ok and not streaming:
            if isinstance(answer, bytes):
                reply = wire.reply_from_json(answer)
                if reply is not None and not await self._remember(turn, recalls, reply):
                    diagnostics.append(NOT_STORED_HEADER)
            else:
                log.warning(
                    "upstream reply larger than %d bytes: relayed, turn not stored", self._max_body
                )
        return _whole(opened, diagnostics, answer)

    async def forward(self, req: ChatRequest, method: str, target: str) -> Outgoing:
        """Pass a request on to the token's upstream as it is (`target`: the path under `/v1`,
        with its query): the status, headers and body, or event stream, come back unchanged.
        Nothing is recalled or captured."""
        headers = self._upstream.request_headers(req.config, req.headers, json_body=bool(req.body))
        url = req.config.api_url(target)
        opened = await self._upstream.open(method, url, headers, req.body or None)
        diagnostics = _diagnostics([], req.started)
        if is_sse(opened):
            stream = relay_events(opened, self._max_body, fmt=req.wire.stream)
            return Outgoing(opened.status, stream_headers(opened, diagnostics), stream=stream)
        return _whole(opened, diagnostics, await read_bounded(opened, self._max_body))

    async def _remember(self, turn: Turn, recalls: list[Recall], reply: Reply) -> bool:
        """Record the completed turn (its events, history and jobs in one transaction);
        False when the database refused it, which the caller tells the client."""
        prefix = max((r.stored_prefix for r in recalls), default=0)
        messages = list(conversation(turn.messages)[prefix:])
        if reply.content or reply.tool_calls:
            messages.append(reply.as_message())
        if not messages:
            return True
        consumers = tuple(s.name for s in self._sources if s.consumes(turn.config))
        meta = {"request_id": turn.request_id, "source": "chat"}
        record = self._recorder.record(turn.scope, messages, turn.query, reply, consumers, meta)
        # Shielded: a client that leaves after the last byte must not lose its turn.
        task: asyncio.Task[object] = asyncio.create_task(record)
        self._inline.add(task)
        task.add_done_callback(self._inline.discard)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._health.write_failed(exc)
            await self._audit_not_stored(turn, exc)
            return False
        self._health.write_succeeded()
        return True

    def _rules_for(self, overrides: ForgeConfig | None, intent: Intent) -> Ranking:
        """The ranking of a request: the server's, its intent's preset and the token's
        `memory.forge` overrides, built once per distinct (config, intent)."""
        key = (overrides, intent)
        rules = self._token_rules.get(key)
        if rules is None:
            if len(self._token_rules) >= _RULES_MEMO:
                self._token_rules.clear()
            rules = self._token_rules[key] = ranking_for(self._ranking, overrides, intent)
        return rules

    def _keep_trace(self, turn: Turn, trace: dict[str, Any]) -> None:
        """Queued, written in a batch off the response's path: a trace never delays or fails
        a request."""
        if self._traces is not None:
            self._traces.save(turn.scope.token_id, turn.request_id, trace)

    async def _audit_not_stored(self, turn: Turn, exc: Exception) -> None:
        try:
            data = {"error": type(exc).__name__}
            await self._audit.record(turn.scope, "turn_not_stored", turn.request_id, data)
        except Exception as audit_exc:  # the same database: it may well refuse this too
            log.error("could not record turn_not_stored: %s", type(audit_exc).__name__)


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
