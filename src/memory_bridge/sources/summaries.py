"""Session summaries (the design's SummarizerWorker): the memory LLM sums up a session's turns
not yet summarised, and the summary is recalled like the turns themselves.

Each turn of a token with `memory.longterm.summaries` (which needs the long-term layer, hence
a memory LLM: no memory LLM, no summaries) enqueues a `summary` job due SUMMARY_IDLE_SECONDS
later, in its session's order. When it runs it summarises the session's unsummarised turns if
its turn is still the session's latest (nothing was said for that long: the session is idle) or
if they number `summaryTurns` or more (a busy session); otherwise a later turn's job will look
again. The summary is a `session.summarised` event — its text and its lineage, the ids of the
`session.appended` events it covers — and a point of the episodic index beside those turns
(`EpisodicMemory.index_summary`), so recall finds it like them; the forge then drops the raw
turns a recalled summary covers (`context.forge.summarised`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from memory_bridge.events import log as event_log
from memory_bridge.events.model import EventType, NewEvent, StoredEvent, session_aggregate
from memory_bridge.sources.base import Exchange
from memory_bridge.sources.episodic import EpisodicMemory
from memory_bridge.sources.episodic_points import SummaryPoint
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.source import LongTermMemory
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import memory_events
from memory_bridge.tenancy.config import TokenConfig

log = logging.getLogger(__name__)

CONSUMER = "summary"
MAX_PROMPT_CHARS = 24_000  # the turns handed to the memory LLM, newest kept
MAX_SUMMARY_CHARS = 4_000

SYSTEM_PROMPT = """You are a Conversation Summariser for a memory store about one user.
Summarise the conversation below in a few sentences: what the user said about themselves, what
was decided or learned, with names, places, numbers and dates as they were given. Write plain
text only, in the language of the conversation."""


def enabled(config: TokenConfig) -> bool:
    return mem0_config.enabled(config) and config.memory_config.longterm.summaries


class SessionSummaries:
    def __init__(self, db: Database, longterm: LongTermMemory, episodic: EpisodicMemory) -> None:
        self._db = db
        self._longterm = longterm
        self._episodic = episodic

    async def remember(self, exchange: Exchange) -> None:
        config = exchange.turn.config
        if not enabled(config):
            return
        scope = exchange.turn.scope
        aggregate = session_aggregate(scope.token_id, scope.user, scope.session)
        events = await self._db.run(lambda conn: _session_events(conn, aggregate))
        limit = config.memory_config.longterm.summary_turns
        pending = due(events, exchange.event_id, limit)
        if not pending:
            return
        text = await self._summarise(scope.token_id, config, pending)
        if not text:
            return
        summary = NewEvent(
            EventType.SESSION_SUMMARISED,
            aggregate,
            {
                "user": scope.user,
                "session": scope.session,
                "text": text,
                "covers": [e.event_id for e in pending],
                "last_at": pending[-1].created_at.isoformat(),
            },
        )
        await event_log.write_appending(
            self._db, lambda conn: event_log.append(conn, scope.token_id, [summary])
        )
        point = summary_point(scope.token_id, summary.event_id, summary.payload)
        await self._episodic.index_summary(config, point)
        log.info("session summary of %d turn(s) stored", len(pending))

    async def index(self, config: TokenConfig, event: StoredEvent) -> None:
        """Index a summary that came by import (its event is in the log already)."""
        if enabled(config):
            point = summary_point(event.token_id, event.event_id, event.payload)
            await self._episodic.index_summary(config, point)

    async def _summarise(
        self, token_id: int, config: TokenConfig, turns: Sequence[StoredEvent]
    ) -> str:
        spec = await self._longterm.write_spec(token_id, config)
        asked = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": transcript(turns)},
        ]
        answer = await self._longterm.pool.with_memory(spec, lambda m: _ask(m, asked), write=True)
        return answer.strip()[:MAX_SUMMARY_CHARS]


def due(events: Sequence[StoredEvent], event_id: str, turns: int) -> list[StoredEvent]:
    """The session's turns to summarise now, by the job of turn `event_id` (events: the
    session's turns and summaries in log order): the unsummarised ones when there are at least
    `turns` of them, or when this turn is still the latest (its job waited the idle time);
    none otherwise (a later turn's job looks again)."""
    covered = {c for e in events if e.type == EventType.SESSION_SUMMARISED for c in _covers(e)}
    said = [e for e in events if e.type == EventType.SESSION_APPENDED]
    pending = [e for e in said if e.event_id not in covered]
    if len(pending) >= turns or (pending and said[-1].event_id == event_id):
        return pending
    return []


def summary_point(token_id: int, summary_id: str, payload: Mapping[str, Any]) -> SummaryPoint:
    """The index point of a `session.summarised` event (live, or replayed by a rebuild); dated
    like the last turn it covers."""
    return SummaryPoint(
        token_id=token_id,
        user=str(payload["user"]),
        session=str(payload["session"]),
        summary_id=summary_id,
        text=str(payload["text"]),
        covers=tuple(str(c) for c in payload["covers"]),
        created_at=datetime.fromisoformat(str(payload["last_at"])).timestamp(),
    )


def transcript(turns: Sequence[StoredEvent]) -> str:
    """The turns' user and assistant texts, oldest first, the newest kept when too long."""
    lines: list[str] = []
    for event in turns:
        for message in event.payload.get("messages") or ():
            role, content = message.get("role"), message.get("content")
            if role in ("user", "assistant") and isinstance(content, str) and content.strip():
                lines.append(f"{role}: {content.strip()}")
    text = "\n".join(lines)
    return text[-MAX_PROMPT_CHARS:]


def _covers(event: StoredEvent) -> list[str]:
    covers = event.payload.get("covers")
    return [str(c) for c in covers] if isinstance(covers, list) else []


def _session_events(conn: Connection, aggregate: str) -> list[StoredEvent]:
    kinds = (EventType.SESSION_APPENDED.value, EventType.SESSION_SUMMARISED.value)
    query = (
        select(memory_events)
        .where(memory_events.c.aggregate_id == aggregate, memory_events.c.type.in_(kinds))
        .order_by(memory_events.c.id)
    )
    return [event_log.stored_event(row) for row in conn.execute(query)]


def _ask(memory: Any, asked: list[dict[str, str]]) -> str:
    answer = memory.llm.generate_response(messages=asked)
    return answer if isinstance(answer, str) else ""


__all__ = ["CONSUMER", "SessionSummaries", "due", "enabled", "summary_point", "transcript"]
