"""Audit events: hidden per-session facts about memory work, listed through the admin API.

Callers pass only categories, counts and ids. Credentials and response bodies never belong here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select

from memory_bridge.core.turn import Scope
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import events

_RECORD = insert(events)


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    type: str
    user: str
    session: str
    request_id: str
    data: dict[str, Any]
    created_at: datetime | None


class AuditLog:
    def __init__(self, sessions: Database) -> None:
        self._sessions = sessions

    async def record(self, scope: Scope, type_: str, request_id: str, data: dict[str, Any]) -> None:
        row = {
            "token_id": scope.token_id,
            "user_id": scope.user,
            "session_id": scope.session,
            "type": type_,
            "request_id": request_id,
            "data": json.dumps(data, separators=(",", ":")),
        }

        def write(conn: Connection) -> None:
            conn.execute(_RECORD, row)

        await self._sessions.write(write)

    async def list(
        self,
        token_id: int,
        *,
        session: str | None = None,
        type_: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Event]:
        query = select(events).where(events.c.token_id == token_id, events.c.id > after_id)
        if session is not None:
            query = query.where(events.c.session_id == session)
        if type_ is not None:
            query = query.where(events.c.type == type_)
        async with self._sessions() as s:
            rows = (await s.execute(query.order_by(events.c.id).limit(limit))).all()
        return [
            Event(
                id=r.id,
                type=r.type,
                user=r.user_id,
                session=r.session_id,
                request_id=r.request_id,
                data=json.loads(r.data),
                created_at=r.created_at,
            )
            for r in rows
        ]

    async def purge(self, token_id: int) -> None:
        async with self._sessions.begin() as s:
            await s.execute(delete(events).where(events.c.token_id == token_id))
