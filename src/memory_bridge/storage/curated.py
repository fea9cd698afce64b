"""Curated documents (MEMORY.md, USER.md), edited only through the admin API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory_bridge.storage.tables import curated

Kind = Literal["memory", "user"]


@dataclass(frozen=True, slots=True)
class CuratedSnapshot:
    memory: str
    user: str


class CuratedRepository:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def get(self, token_id: int, kind: Kind, user: str) -> str:
        async with self._sessions() as s:
            body = await s.scalar(
                select(curated.c.body).where(
                    curated.c.token_id == token_id,
                    curated.c.kind == kind,
                    curated.c.user_id == user,
                )
            )
        return body or ""

    async def put(self, token_id: int, kind: Kind, user: str, body: str) -> None:
        where = (curated.c.token_id == token_id, curated.c.kind == kind, curated.c.user_id == user)
        async with self._sessions.begin() as s:
            changed = await s.execute(update(curated).where(*where).values(body=body))
            if changed.rowcount:  # type: ignore[attr-defined]
                return
        try:
            async with self._sessions.begin() as s:
                await s.execute(
                    curated.insert().values(token_id=token_id, kind=kind, user_id=user, body=body)
                )
        except IntegrityError:  # a concurrent PUT inserted first: last writer wins
            async with self._sessions.begin() as s:
                await s.execute(update(curated).where(*where).values(body=body))

    async def snapshot(self, token_id: int, user: str) -> CuratedSnapshot:
        """Both documents in one read. An end user without a USER.md gets the token-wide one."""
        async with self._sessions() as s:
            rows = (
                await s.execute(
                    select(curated.c.kind, curated.c.user_id, curated.c.body).where(
                        curated.c.token_id == token_id, curated.c.user_id.in_({"", user})
                    )
                )
            ).all()
        docs = {(r.kind, r.user_id): r.body for r in rows}
        user_doc = docs.get(("user", user)) or docs.get(("user", ""), "")
        return CuratedSnapshot(memory=docs.get(("memory", ""), ""), user=user_doc)

    async def purge(self, token_id: int) -> None:
        async with self._sessions.begin() as s:
            await s.execute(delete(curated).where(curated.c.token_id == token_id))
