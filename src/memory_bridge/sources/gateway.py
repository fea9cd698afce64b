"""The Memory Gateway layer: best-effort recall before forwarding, add→flush after a turn.

The Gateway is independent of curated memory: the two never read from, write to or reconcile
with each other. Every outcome is an audit event; no credential or response body is in one.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from memory_bridge.core.messages import Message
from memory_bridge.core.turn import Turn
from memory_bridge.sources import gateway_client as gw
from memory_bridge.sources.base import (
    Exchange,
    OnRecallFailure,
    OutcomeUnknown,
    PermanentFailure,
    Recall,
)
from memory_bridge.storage.audit import AuditLog
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.tenancy.memory_config import DegradedWarning, gateway_status

log = logging.getLogger(__name__)

# The steps of a Gateway job, recorded durably (docs/events.md).
ADD_IN_FLIGHT, ADD_OK, ADD_FAILED, ADD_UNKNOWN = (
    "add_in_flight",
    "add_ok",
    "add_failed",
    "add_unknown",
)


class MemoryGateway:
    name = "gateway"
    on_recall_failure = OnRecallFailure.BEST_EFFORT

    def __init__(
        self, client: httpx.AsyncClient, events: AuditLog, degraded: DegradedWarning
    ) -> None:
        self._client = client
        self._events = events
        self._degraded = degraded

    def consumes(self, config: TokenConfig) -> bool:
        return config.memory_config.gateway is not None

    async def recall(self, turn: Turn) -> Recall:
        cfg = turn.config.memory_config.gateway
        if cfg is None:
            self._degraded.check(turn.scope.token_id, turn.config.memory_config)
            return Recall(source=self.name)
        rule = (gw.GATEWAY_RULE,)
        conversation = gw.conversation_id(turn.scope.user, turn.scope.session)
        if not turn.query or conversation is None:
            return Recall(source=self.name, system_blocks=rule, items=0)
        try:
            hits = await gw.search(
                self._client, cfg, conversation_id=conversation, query=turn.query
            )
        except gw.GatewayError as exc:
            await self._audit(turn, "memory_gateway_recall_failed", _failure(exc))
            return Recall(source=self.name, system_blocks=rule, failed=True)
        await self._audit(
            turn,
            "memory_gateway_recall_succeeded",
            {"scopes": list(cfg.scope), "result_count": len(hits)},
        )
        text = gw.render_reference(hits)
        reference = Message(role="user", content=text) if text else None
        # Diagnostics count the hits, not the rule and the message that carry them.
        return Recall(source=self.name, system_blocks=rule, reference=reference, items=len(hits))

    async def remember(self, exchange: Exchange) -> None:
        """Add the turn, then flush its session: the add at most once.

        A Gateway add is not idempotent, so it is never repeated automatically: the job
        records `add_in_flight` before sending; a job found in that step again (its worker
        died mid-add) ends `add_unknown`, as does an add whose outcome cannot be known (a
        timeout after sending, a 5xx). A definite refusal ends `add_failed`. After `add_ok`,
        only the flush is left, and it may run again.
        """
        turn = exchange.turn
        cfg = turn.config.memory_config.gateway
        reply = exchange.reply.content or ""
        # A reply of tool calls only is not a finished turn; nothing to persist without text.
        conversation = gw.conversation_id(turn.scope.user, turn.scope.session)
        if cfg is None or not exchange.reply.has_text or not turn.query or conversation is None:
            return
        session = gw.gateway_session_id(conversation)
        if exchange.resumed_step in (ADD_IN_FLIGHT, ADD_UNKNOWN):
            await self._step(exchange, ADD_UNKNOWN)
            await self._audit(
                turn, "memory_gateway_add_failed", {"operation": "add", "category": "unknown"}
            )
            raise OutcomeUnknown("the Gateway add was in flight when its worker stopped")
        if exchange.resumed_step != ADD_OK:
            await self._step(exchange, ADD_IN_FLIGHT)
            try:
                await gw.add(
                    self._client,
                    cfg,
                    session_id=conversation,
                    user_text=turn.query,
                    assistant_text=reply,
                )
            except gw.GatewayError as exc:
                await self._audit(turn, "memory_gateway_add_failed", _failure(exc))
                if _ambiguous(exc):
                    await self._step(exchange, ADD_UNKNOWN)
                    raise OutcomeUnknown(str(exc)) from None
                await self._step(exchange, ADD_FAILED)
                raise PermanentFailure(str(exc)) from None
            await self._step(exchange, ADD_OK)
            await self._audit(
                turn,
                "memory_gateway_add_succeeded",
                {"gateway_session": session, "message_count": 2},
            )
        try:
            await gw.flush(self._client, cfg, session_id=conversation)
        except gw.GatewayError as exc:
            data = {**_failure(exc), "add_succeeded": True}
            await self._audit(turn, "memory_gateway_flush_failed", data)
            return
        await self._audit(turn, "memory_gateway_flush_succeeded", {"gateway_session": session})

    @staticmethod
    async def _step(exchange: Exchange, name: str) -> None:
        if exchange.progress is not None:
            await exchange.progress.step(name)

    async def purge(self, token_id: int) -> None:
        """Gateway memories belong to the Gateway user, not to this token: nothing to delete."""

    def describe(self, config: TokenConfig) -> str:
        return gateway_status(config.memory_config)

    async def _audit(self, turn: Turn, type_: str, data: dict[str, Any]) -> None:
        try:
            await self._events.record(turn.scope, type_, turn.request_id, data)
        except Exception as exc:  # an audit write must never break the turn it describes
            log.error("could not record %s: %s", type_, type(exc).__name__)


def _ambiguous(exc: gw.GatewayError) -> bool:
    """Whether the add may have been stored although it failed: a timeout (the request may
    have arrived), a 5xx (the server may have stored it before failing), or a reply we could
    not read. Refused connections and 4xx answers are definite."""
    if exc.category == "timeout":
        return True
    if exc.category in ("http_error", "invalid_json", "invalid_shape"):
        return exc.status is None or exc.status >= 500 or exc.status < 400
    return False


def _failure(exc: gw.GatewayError) -> dict[str, Any]:
    data: dict[str, Any] = {"operation": exc.operation, "category": exc.category}
    if exc.status is not None:
        data["status"] = exc.status
    log.warning("memory gateway %s failed: %s", exc.operation, exc.category)
    return data
