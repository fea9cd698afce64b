"""What the admin API lists of a token's conversations: its end users, their sessions
(message counts, last activity), one session's stored history page by page.

Reads go to the projection (`messages`); deleting a session or a curated document deletes it
everywhere at once (`lifecycle.forget`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select

from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import messages


@dataclass(frozen=True, slots=True)
class SessionSummary:
    user: str
    session: str
    messages: int
    first_activity: datetime | None
    last_activity: datetime | None


@dataclass(frozen=True, slots=True)
class UserSummary:
    user: str
    sessions: int
    messages: int
    last_activity: datetime | None


@dataclass(frozen=True, slots=True)
class StoredRow:
    id: int
    role: str
    message: dict[str, Any]
    created_at: datetime | None


class SessionIndex:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def sessions(
        self, token_id: int, user: str | None, limit: int, offset: int
    ) -> list[SessionSummary]:
        """Sessions of the token (or of one end user), the most recently active first."""
        query = (
            select(
                messages.c.user_id,
                messages.c.session_id,
                func.count().label("n"),
                func.min(messages.c.created_at).label("first"),
                func.max(messages.c.created_at).label("last"),
            )
            .where(messages.c.token_id == token_id)
            .group_by(messages.c.user_id, messages.c.session_id)
            # Row ids grow with time on both databases: a tie-free order for paging.
            .order_by(func.max(messages.c.id).desc())
            .limit(limit)
            .offset(offset)
        )
        if user is not None:
            query = query.where(messages.c.user_id == user)

        def read(conn: Connection) -> list[SessionSummary]:
            return [
                SessionSummary(r.user_id, r.session_id, int(r.n), r.first, r.last)
                for r in conn.execute(query)
            ]

        return await self._db.run(read)

    async def users(self, token_id: int, limit: int, offset: int) -> list[UserSummary]:
        """End users of the token ("" is the token-wide one), the most recently active first."""
        query = (
            select(
                messages.c.user_id,
                func.count(func.distinct(messages.c.session_id)).label("sessions"),
                func.count().label("n"),
                func.max(messages.c.created_at).label("last"),
            )
            .where(messages.c.token_id == token_id)
            .group_by(messages.c.user_id)
            .order_by(func.max(messages.c.id).desc())
            .limit(limit)
            .offset(offset)
        )

        def read(conn: Connection) -> list[UserSummary]:
            return [
                UserSummary(r.user_id, int(r.sessions), int(r.n), r.last)
                for r in conn.execute(query)
            ]

        return await self._db.run(read)

    async def history(
        self, token_id: int, user: str, session: str, after: int, limit: int
    ) -> list[StoredRow]:
        """One session's stored messages, oldest first, with ids above `after` (paging)."""
        query = (
            select(messages.c.id, messages.c.role, messages.c.body, messages.c.created_at)
            .where(
                messages.c.token_id == token_id,
                messages.c.user_id == user,
                messages.c.session_id == session,
                messages.c.id > after,
            )
            .order_by(messages.c.id)
            .limit(limit)
        )

        def read(conn: Connection) -> list[StoredRow]:
            return [
                StoredRow(int(r.id), r.role, json.loads(r.body), r.created_at)
                for r in conn.execute(query)
            ]

        return await self._db.run(read)
