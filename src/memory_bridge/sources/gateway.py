"""The Memory Gateway layer: best-effort recall before forwarding, add→flush after a turn.

The Gateway is independent of curated memory: the two never read from, write to or reconcile
with each other. Every outcome is an audit event; no credential or response body is in one.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from memory_bridge.messages import Message
from memory_bridge.sources import gateway_client as gw
from memory_bridge.sources.base import Exchange, OnRecallFailure, Recall
from memory_bridge.storage.events import EventLog
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.tenancy.memory_config import DegradedWarning, gateway_status
from memory_bridge.turn import Turn

log = logging.getLogger(__name__)


class MemoryGateway:
    name = "gateway"
    on_recall_failure = OnRecallFailure.BEST_EFFORT
    remember_inline = False

    def __init__(
        self, client: httpx.AsyncClient, events: EventLog, degraded: DegradedWarning
    ) -> None:
        self._client = client
        self._events = events
        self._degraded = degraded

    async def recall(self, turn: Turn) -> Recall:
        cfg = turn.config.memory_config.gateway
        if cfg is None:
            self._degraded.check(turn.scope.token_id, turn.config.memory_config)
            return Recall(source=self.name)
        rule = (gw.GATEWAY_RULE,)
        if not turn.query:
            return Recall(source=self.name, system_blocks=rule)
        try:
            hits = await gw.search(
                self._client, cfg, conversation_id=turn.scope.session, query=turn.query
            )
        except gw.GatewayError as exc:
            await self._audit(turn, "memory_gateway_recall_failed", _failure(exc))
            return Recall(source=self.name, system_blocks=rule)
        await self._audit(
            turn,
            "memory_gateway_recall_succeeded",
            {"scopes": list(cfg.scope), "result_count": len(hits)},
        )
        text = gw.render_reference(hits)
        reference = Message(role="user", content=text) if text else None
        return Recall(source=self.name, system_blocks=rule, reference=reference)

    async def remember(self, exchange: Exchange) -> None:
        turn = exchange.turn
        cfg = turn.config.memory_config.gateway
        reply = exchange.reply.content or ""
        # A reply of tool calls only is not a finished turn; nothing to persist without text.
        if cfg is None or not exchange.reply.has_text or not turn.query:
            return
        session = gw.gateway_session_id(turn.scope.session)
        try:
            await gw.add(
                self._client,
                cfg,
                session_id=turn.scope.session,
                user_text=turn.query,
                assistant_text=reply,
            )
        except gw.GatewayError as exc:
            await self._audit(turn, "memory_gateway_add_failed", _failure(exc))
            return
        await self._audit(
            turn, "memory_gateway_add_succeeded", {"gateway_session": session, "message_count": 2}
        )
        try:
            await gw.flush(self._client, cfg, session_id=turn.scope.session)
        except gw.GatewayError as exc:
            data = {**_failure(exc), "add_succeeded": True}
            await self._audit(turn, "memory_gateway_flush_failed", data)
            return
        await self._audit(turn, "memory_gateway_flush_succeeded", {"gateway_session": session})

    async def purge(self, token_id: int) -> None:
        """Gateway memories belong to the Gateway user, not to this token: nothing to delete."""

    def describe(self, config: TokenConfig) -> str:
        return gateway_status(config.memory_config)

    async def _audit(self, turn: Turn, type_: str, data: dict[str, Any]) -> None:
        try:
            await self._events.record(turn.scope, type_, turn.request_id, data)
        except Exception as exc:  # an audit write must never break the turn it describes
            log.error("could not record %s: %s", type_, type(exc).__name__)


def _failure(exc: gw.GatewayError) -> dict[str, Any]:
    data: dict[str, Any] = {"operation": exc.operation, "category": exc.category}
    if exc.status is not None:
        data["status"] = exc.status
    log.warning("memory gateway %s failed: %s", exc.operation, exc.category)
    return data
