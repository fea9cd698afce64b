"""Session history: the conversation stream of one (token, end user, session)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory_bridge.messages import Message
from memory_bridge.storage.tables import messages
from memory_bridge.turn import Scope

# What a stored message keeps: enough to restore a tool-call chain, nothing injected or private.
_KEPT_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")


class SessionRepository:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def recent(self, scope: Scope, limit: int) -> list[Message]:
        async with self._sessions() as s:
            rows = (
                await s.execute(
                    select(messages.c.body)
                    .where(
                        messages.c.token_id == scope.token_id,
                        messages.c.user_id == scope.user,
                        messages.c.session_id == scope.session,
                    )
                    .order_by(messages.c.id.desc())
                    .limit(limit)
                )
            ).all()
        return [Message.model_validate(json.loads(r.body)) for r in reversed(rows)]

    async def append(self, scope: Scope, items: Sequence[Message]) -> None:
        if not items:
            return
        rows = [
            {
                "token_id": scope.token_id,
                "user_id": scope.user,
                "session_id": scope.session,
                "role": m.role,
                "body": json.dumps(_stored_form(m), ensure_ascii=False),
            }
            for m in items
        ]
        async with self._sessions.begin() as s:
            await s.execute(insert(messages), rows)

    async def purge(self, token_id: int) -> None:
        async with self._sessions.begin() as s:
            await s.execute(delete(messages).where(messages.c.token_id == token_id))


def _stored_form(msg: Message) -> dict[str, Any]:
    data = msg.model_dump(include=set(_KEPT_FIELDS), exclude_none=True)
    data.setdefault("content", None)
    return data
