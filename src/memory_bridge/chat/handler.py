"""One turn through the proxy: recall, assemble, forward, capture, remember.

A turn comes as a chat completion or as a Responses API request (`chat.formats`); the steps
and the failure policy are the same for both.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

from memory_bridge.chat.capture import DEFAULT_LIMIT
from memory_bridge.chat.formats import CHAT, WireFormat
from memory_bridge.chat.relay import (
    StreamFormat,
    is_sse,
    read_bounded,
    relay_events,
    stream_headers,
)
from memory_bridge.chat.request_reader import RequestReader, scope_of
from memory_bridge.chat.response_claims import Echo, ResponseClaims
from memory_bridge.chat.upstream import Opened, Upstream
from memory_bridge.context.forge import fade
from memory_bridge.context.forge.intent import Intent, classify, ranking_for
from memory_bridge.context.forge.pipeline import Forged, forge
from memory_bridge.context.forge.trace import injected_per_source
from memory_bridge.context.recall import recall_all
from memory_bridge.context.template import MemoryTemplate
from memory_bridge.core import metrics
from memory_bridge.core.message_bounds import bounded
from memory_bridge.core.messages import conversation, latest_user_text
from memory_bridge.core.token_count import count_tokens
from memory_bridge.core.turn import TOKEN_WIDE_USER, Reply, Turn
from memory_bridge.events.recorder import TurnRecorder
from memory_bridge.sources import summaries
from memory_bridge.sources.base import MemorySource, Recall
from memory_bridge.storage.access import AccessStats
from memory_bridge.storage.audit import AuditLog
from memory_bridge.storage.health import StorageHealth
from memory_bridge.storage.traces import TraceStore
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.tenancy.forge_config import ForgeConfig
from memory_bridge.tenancy.ranking import Ranking

log = logging.getLogger(__name__)
T = TypeVar("T")
# On a response whose turn the database refused (a stream says so in-band: relay.NOT_STORED).
NOT_STORED_HEADER = (b"x-memorybridge-stored", b"false")
# On a memory turn that names no end user (`user`, `X-User-Id`): its memory is the token's own,
# shared by every request that names none.
NO_END_USER_HEADER = (b"x-memorybridge-end-user", b"none (token-wide memory)")
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
        claims: ResponseClaims,
        max_upstream_body: int = DEFAULT_LIMIT,
        ranking: Ranking | None = None,
        traces: TraceStore | None = None,
        access: AccessStats | None = None,
        max_request_messages: int = 10_000,
        parse_in_thread_bytes: int = 256 * 1024,
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
        self._access = access
        self._claims = claims
        self._reader = RequestReader(max_request_messages, parse_in_thread_bytes)

    @property
    def claims(self) -> ResponseClaims:
        return self._claims

    async def handle(self, req: ChatRequest) -> Outgoing:
        """Answer one turn. A client that disconnects cancels the calling task; the upstream
        request is abandoned then, but a turn being stored is not."""
        wire = req.wire
        body = await self._reader.parse(wire, req.body)
        if wire.echo is not None:  # a stored response it continues must be the token's own
            await self._claims.check_body(req.token_id, body)
        scope = scope_of(req.token_id, body, req.headers)
        config = req.config
        headers = self._upstream.request_headers(config, req.headers, json_body=True)
        streaming = body.get("stream") is True
        url = config.api_url(wire.path)
        if config.memory_config.passthrough:
            # No layer to feed or fill: the client's bytes go upstream, nothing is captured.
            opened = await self._upstream.open("POST", url, headers, req.body)
            echo = None if wire.echo is None else wire.echo(body, None)
            diagnostics = _diagnostics([], req.started)
            sse = streaming and is_sse(opened)
            return await self._relay(opened, sse, wire.stream, diagnostics, echo, req.token_id)
        messages = wire.messages(body)
        turn = Turn(
            request_id=req.request_id,
            scope=scope,
            config=config,
            messages=messages,
            query=latest_user_text(messages),
        )
        forged = await self.recall(turn, drop_history=wire.upstream_holds_history(body))
        self._used(turn, forged)
        memory = config.memory_config
        recalls = forged.recalls
        metrics.injected(injected_per_source(forged.trace))
        limit = self._recorder.max_message_bytes
        cut = sum(1 for m in conversation(messages) if bounded(m, limit) is not m)
        if cut:  # these will be stored shortened (MAX_STORED_MESSAGE_BYTES, placeholders)
            forged.trace["stored_shortened"] = cut
        self._keep_trace(turn, forged.trace)
        template = self._templates[config.template]
        forwarded = wire.forward(body, messages, recalls, template, memory.placement)
        payload = req.body
        if forwarded is not None:
            payload = await self._reader.dumps(len(req.body), forwarded)
        echo = None if wire.echo is None else wire.echo(body, forwarded)
        diagnostics = _diagnostics(recalls, req.started)
        if scope.user == TOKEN_WIDE_USER:
            diagnostics.append(NO_END_USER_HEADER)
            self._reader.warn_no_end_user(scope.token_id)
        metrics.stage("added", time.perf_counter() - req.started)
        asked = time.perf_counter()
        opened = await self._upstream.open("POST", url, headers, payload)
        metrics.stage("upstream_first_byte", time.perf_counter() - asked)
        return await self._answer(opened, req, turn, recalls, streaming, diagnostics, echo)

    async def _answer(
        self,
        opened: Opened,
        req: ChatRequest,
        turn: Turn,
        recalls: list[Recall],
        streaming: bool,
        diagnostics: list[tuple[bytes, bytes]],
        echo: Echo | None,
    ) -> Outgoing:
        """The upstream's answer relayed, the turn remembered once the reply is complete."""
        wire = req.wire
        if streaming and opened.ok and is_sse(opened):
            remember = partial(self._remember, turn, recalls)
            stream = relay_events(opened, self._max_body, remember, wire.stream)
            stream = self._claimed_stream(stream, req.token_id, echo)
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
        answer = await self._claimed_whole(answer, opened, req.token_id, echo)
        return _whole(opened, diagnostics, answer)

    async def recall(self, turn: Turn, *, drop_history: bool = False) -> Forged:
        """What this turn would be given: every source recalled (the failure policy applied),
        then forged with the token's rules. Nothing is stored; the MCP `search_memory` tool
        asks this too, so a tool's search and a chat request rank alike."""
        intent = classify(turn.query)
        rules = self.rules_for(turn.config.memory_config.forge, intent)
        recalls = await recall_all(self._sources, turn)
        if drop_history:
            # Still recalled: the history source also tells what of the request is stored.
            recalls = [replace(r, history=()) if r.history else r for r in recalls]
        used = await self._last_used(turn, recalls) if fade.enabled(rules) else None
        forge_started = time.perf_counter()
        forged = forge(recalls, turn.messages, rules, count_tokens, time.time(), intent, used)
        metrics.stage("forge", time.perf_counter() - forge_started)
        return forged

    async def _last_used(self, turn: Turn, recalls: list[Recall]) -> dict[str, float]:
        """When the recalled candidates were last injected for this end user (fading)."""
        if self._access is None:
            return {}
        items = [
            (c.source, c.id)
            for r in recalls
            for c in r.candidates
            if c.source in fade.FADED_SOURCES
        ]
        return await self._access.last_used(turn.scope.token_id, turn.scope.user, items)

    def _used(self, turn: Turn, forged: Forged) -> None:
        """Injection refreshes what was injected (fading on): noted, written in a batch."""
        if self._access is None or "fading" not in forged.trace:
            return
        items = [
            (c.source, c.id, c.importance)
            for c in (o.scored.candidate for o in forged.kept)
            if c.source in fade.FADED_SOURCES
        ]
        if items:
            self._access.touch(turn.scope.token_id, turn.scope.user, items, time.time())

    async def forward(
        self, req: ChatRequest, method: str, target: str, echo: Echo | None = None
    ) -> Outgoing:
        """Pass a request on to the token's upstream as it is (`target`: the path under `/v1`,
        with its query): the status, headers and body, or event stream, come back unchanged
        (but for a response object, fixed by `echo` when given). Nothing is recalled or
        captured."""
        headers = self._upstream.request_headers(req.config, req.headers, json_body=bool(req.body))
        url = req.config.api_url(target)
        opened = await self._upstream.open(method, url, headers, req.body or None)
        diagnostics = _diagnostics([], req.started)
        return await self._relay(opened, is_sse(opened), req.wire.stream, diagnostics, echo, None)

    async def _relay(
        self,
        opened: Opened,
        sse: bool,
        fmt: StreamFormat,
        diagnostics: list[tuple[bytes, bytes]],
        echo: Echo | None,
        claim_for: int | None,
    ) -> Outgoing:
        """An answer relayed without capture: as an event stream or whole."""
        if sse:
            stream = relay_events(opened, self._max_body, fmt=fmt)
            if echo is not None:
                stream = self._claims.stream(stream, echo, claim_for)
            return Outgoing(opened.status, stream_headers(opened, diagnostics), stream=stream)
        answer = await read_bounded(opened, self._max_body)
        if echo is not None:
            answer = await self._claimed_whole(answer, opened, claim_for, echo)
        return _whole(opened, diagnostics, answer)

    def _claimed_stream(
        self, stream: AsyncGenerator[bytes, None], token_id: int, echo: Echo | None
    ) -> AsyncGenerator[bytes, None]:
        """A Responses stream (`echo` given) as the client gets it: see `response_claims`."""
        return stream if echo is None else self._claims.stream(stream, echo, token_id)

    async def _claimed_whole(
        self,
        answer: bytes | AsyncGenerator[bytes, None],
        opened: Opened,
        claim_for: int | None,
        echo: Echo | None,
    ) -> bytes | AsyncGenerator[bytes, None]:
        """A Responses JSON reply (`echo` given) as the client gets it. One too large to hold
        is relayed as it is, unclaimed (docs/decisions.md)."""
        if echo is None or not opened.ok or not isinstance(answer, bytes):
            return answer
        return await self._claims.whole(answer, echo, claim_for)

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
        if summaries.enabled(turn.config):
            consumers += (summaries.CONSUMER,)
        meta: dict[str, Any] = {"request_id": turn.request_id, "source": "chat"}
        metrics.usage(turn.scope.token_id, reply.usage)
        cached = metrics.cached_tokens(reply.usage)
        if cached is not None:  # the console shows it beside the turn's trace
            meta["cached_tokens"] = cached
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
            metrics.turn(stored=False)
            await self._audit_not_stored(turn, exc)
            return False
        self._health.write_succeeded()
        metrics.turn(stored=True)
        return True

    def rules_for(self, overrides: ForgeConfig | None, intent: Intent) -> Ranking:
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
            # Whose: an erasure or a session's delete finds the traces by them, also of a
            # request that was never stored (docs/admin-api.md).
            trace["user"] = turn.scope.user
            trace["session"] = turn.scope.session
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


def _diagnostics(recalls: list[Recall], started: float) -> list[tuple[bytes, bytes]]:
    overhead = (time.perf_counter() - started) * 1000
    injected = ", ".join(f"{r.source}={r.injected}" for r in recalls)
    return [
        (b"x-memorybridge-overhead-ms", f"{overhead:.2f}".encode()),
        (b"x-memorybridge-injected", injected.encode()),
    ]
