"""Session summaries (the design's SummarizerWorker): the memory LLM sums up a session's turns
not yet summarised, and the summary is recalled like the turns themselves.

Each turn of a token with `memory.longterm.summaries` (which needs the long-term layer, hence
a memory LLM: no memory LLM, no summaries) enqueues a `summary` job due SUMMARY_IDLE_SECONDS
later, in its session's order. When it runs it summarises the session's unsummarised turns if
its turn is still the session's latest (nothing was said for that long: the session is idle) or
if they number `summaryTurns` or more (a busy session); otherwise a later turn's job will look
again. The summary is a `session.summarised` event — its text, its importance when the LLM
gave a valid one, and its lineage, the ids of the `session.appended` events it covers — and a
point of the episodic index beside those turns (`EpisodicMemory.index_summary`), so recall finds
it like them; the forge then drops the raw turns a recalled summary covers
(`context.forge.summarised`) and fades it by its importance (`context.forge.fade`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from memory_bridge.core.candidates import importance_of
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
was decided or learned, with names, places, numbers and dates as they were given, in the
language of the conversation. Also rate how much the conversation matters for remembering the
user later, from 0 (small talk) to 1 (essential facts, decisions, commitments).
Answer with one JSON object and nothing else:
{"summary": "<the summary, plain text>", "importance": <a number from 0 to 1>}"""


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
        text, importance = parse_answer(await self._summarise(scope.token_id, config, pending))
        if not text:
            return
        payload: dict[str, Any] = {
            "user": scope.user,
            "session": scope.session,
            "text": text,
            "covers": [e.event_id for e in pending],
            "last_at": pending[-1].created_at.isoformat(),
        }
        if importance is not None:  # absent: the default importance, as for older events
            payload["importance"] = importance
        summary = NewEvent(EventType.SESSION_SUMMARISED, aggregate, payload)
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
        return await self._longterm.pool.with_memory(spec, lambda m: _ask(m, asked), write=True)


def parse_answer(answer: str) -> tuple[str, float | None]:
    """(summary text, importance or None for the default) of the memory LLM's answer: the
    JSON object the prompt asks for; a plain-text answer (a model that ignored the format) is
    the summary itself. A JSON answer without a summary text gives none; an importance that is
    not a number from 0 to 1 is the default, logged (never the answer's words)."""
    text = answer.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, flags=re.DOTALL)
    if fenced is not None:
        text = fenced.group(1)
    try:
        data = json.loads(text)
    except ValueError:
        return text[:MAX_SUMMARY_CHARS], None
    if not isinstance(data, dict):
        return text[:MAX_SUMMARY_CHARS], None
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        log.warning("the summary answer has no 'summary' text; no summary stored")
        return "", None
    importance = importance_of(data.get("importance"))
    if importance is None and data.get("importance") is not None:
        log.warning("the summary's importance is not a number from 0 to 1; the default is used")
    return summary.strip()[:MAX_SUMMARY_CHARS], importance


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
        importance=importance_of(payload.get("importance")),
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
    answer = memory.llm.generate_response(messages=asked, response_format={"type": "json_object"})
    return answer if isinstance(answer, str) else ""


__all__ = [
    "CONSUMER",
    "SessionSummaries",
    "due",
    "enabled",
    "parse_answer",
    "summary_point",
    "transcript",
]
