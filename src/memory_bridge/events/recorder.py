"""A completed turn recorded: one transaction appends its events, projects them into session
history, and enqueues the after-turn jobs of every consumer that wants the turn.

This is the commit point of a turn (the failure policy): when the transaction fails, nothing
of the turn is stored and nothing will be done for it, and the caller says so to the client.

A turn of a token deleted while it was being answered is not stored: the transaction reads
the token's row (FOR SHARE on PostgreSQL, so a purge's delete of the row waits for it or it
for the purge) and writes nothing when the row is gone. A turn that committed first is
removed by the purge's last step, which runs after the row is deleted (`lifecycle.purge`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, select

from memory_bridge.core import metrics
from memory_bridge.core.message_bounds import bounded, truncate
from memory_bridge.core.messages import Message
from memory_bridge.core.turn import Reply, Scope
from memory_bridge.events import log
from memory_bridge.events.backlog import BoundGate, Bounds, enqueue_bounded
from memory_bridge.events.model import EventType, NewEvent, StoredEvent, session_aggregate
from memory_bridge.storage.db import Database
from memory_bridge.storage.sessions import stored_form
from memory_bridge.storage.tables import tokens

_VERSION_MEMO = 10_000
MAX_MESSAGES_PER_TURN = 500


def at_most(messages: Sequence[Message], limit: int) -> Sequence[Message]:
    """A turn's messages to store: all of them, or the newest `limit - 1` after one marker
    that says how many older ones were left out (a long pasted conversation must not become
    as many history rows). A kept part never starts with a tool result whose call was left
    out: an upstream refuses such a history."""
    if len(messages) <= limit:
        return messages
    start = len(messages) - (limit - 1)
    while start < len(messages) and messages[start].role == "tool":
        start += 1
    note = (
        f"[MemoryBridge: {start} earlier messages of this turn were not stored "
        f"(MAX_STORED_MESSAGES_PER_TURN is {limit})]"
    )
    return [Message(role="assistant", content=note), *messages[start:]]


_TOKEN_ROW = (
    select(tokens.c.id).where(tokens.c.id == bindparam("token_id")).with_for_update(read=True)
)


def turn_payload(
    scope: Scope,
    messages: Sequence[Message],
    query: str,
    reply: Reply,
    max_bytes: int,
    max_messages: int = MAX_MESSAGES_PER_TURN,
) -> dict[str, Any]:
    """What a `session.appended` event of a completed turn says: the new messages and the
    reply in their stored (bounded) form, the memory query, how the reply finished."""
    return {
        "user": scope.user,
        "session": scope.session,
        "messages": [stored_form(bounded(m, max_bytes)) for m in at_most(messages, max_messages)],
        "query": truncate(query, max_bytes),
        "finish_reason": reply.finish_reason,
    }


class TurnRecorder:
    def __init__(
        self,
        db: Database,
        max_message_bytes: int,
        delays: Mapping[str, float] | None = None,
        max_messages: int = MAX_MESSAGES_PER_TURN,
        bounds: Bounds | None = None,
    ) -> None:
        self._db = db
        # The backlog's bounds (`events.backlog`), counted when they may be near; None: none.
        self._gate = BoundGate(bounds) if bounds is not None else None
        self._max_bytes = max_message_bytes
        self._delays = dict(delays or {})  # per consumer: seconds before its job is due
        self._max_messages = max_messages
        self._listeners: list[Callable[[], None]] = []
        # The last version this process appended per session: the next turn skips reading it.
        # Another process may have appended since; the unique version then refuses the insert
        # and the retry reads the version afresh.
        self._versions: dict[str, int] = {}

    @property
    def max_message_bytes(self) -> int:
        return self._max_bytes

    def on_enqueued(self, listener: Callable[[], None]) -> None:
        """Call `listener()` after a turn's jobs are committed (a worker's wake-up)."""
        self._listeners.append(listener)

    async def record(
        self,
        scope: Scope,
        messages: Sequence[Message],
        query: str,
        reply: Reply,
        consumers: Sequence[str],
        meta: dict[str, Any],
    ) -> StoredEvent | None:
        """The turn's `session.appended` event as stored; None when its token is gone."""
        payload = turn_payload(scope, messages, query, reply, self._max_bytes, self._max_messages)
        aggregate = session_aggregate(scope.token_id, scope.user, scope.session)
        appended = NewEvent(EventType.SESSION_APPENDED, aggregate, payload, meta)
        order_key = aggregate

        attempts = 0
        past: dict[str, str] = {}
        counts: tuple[int, int] | None = None
        bounds, seqs = self._bounds(scope.token_id, consumers)

        def work(conn: Connection) -> StoredEvent | None:
            nonlocal attempts, past, counts
            attempts += 1
            if conn.execute(_TOKEN_ROW, {"token_id": scope.token_id}).first() is None:
                return None
            # Under the lock the version is read afresh: the turn before may have committed
            # an instant ago, before its process remembered the version it wrote.
            locked = log.lock_aggregate(conn, aggregate)
            version = self._versions.get(aggregate) if attempts == 1 and not locked else None
            if version is None:
                version = log.current_version(conn, aggregate)
            events = [appended]
            if version == 0:
                started = {"user": scope.user, "session": scope.session}
                events.insert(0, NewEvent(EventType.SESSION_STARTED, aggregate, started, meta))
            stored = log.append(conn, scope.token_id, events, versions={aggregate: version})
            past, counts = enqueue_bounded(
                conn,
                appended.event_id,
                scope.token_id,
                order_key,
                consumers,
                self._delays,
                bounds,
            )
            return stored[-1]

        try:
            event = await log.write_appending(self._db, work)
        except BaseException:
            self._versions.pop(aggregate, None)
            raise
        if event is None:
            self._versions.pop(aggregate, None)
            return None
        self._written(scope.token_id, aggregate, event, counts, seqs, past)
        if consumers:
            for listener in self._listeners:
                listener()
        return event

    def _bounds(
        self, token_id: int, consumers: Sequence[str]
    ) -> tuple[Bounds | None, tuple[int, int]]:
        """The backlog's bounds when this turn must count its jobs (None: surely under them),
        and the turn's numbers for the gate."""
        gate = self._gate
        if gate is None or not consumers:
            return None, (0, 0)
        count_it, mine, everyone = gate.decide(token_id)
        return (gate.bounds if count_it else None), (mine, everyone)

    def _written(
        self,
        token_id: int,
        aggregate: str,
        event: StoredEvent,
        counts: tuple[int, int] | None,
        seqs: tuple[int, int],
        past: dict[str, str],
    ) -> None:
        """What a stored turn leaves in memory: its session's version, the backlog's count."""
        if len(self._versions) >= _VERSION_MEMO:
            self._versions.clear()
        self._versions[aggregate] = event.version
        gate = self._gate
        if gate is not None and counts is not None:
            gate.counted(token_id, counts, seqs)
        if past and gate is not None:
            metrics.past_bound(past)
