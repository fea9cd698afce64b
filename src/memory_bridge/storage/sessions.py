"""Session history: the conversation stream of one (token, end user, session)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, bindparam, delete, insert, select

from memory_bridge.core.messages import Message
from memory_bridge.core.token_count import count_tokens
from memory_bridge.core.turn import Scope
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import messages

# What a stored message keeps: enough to restore a tool-call chain, nothing injected or private.
_KEPT_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")
# Identity digests of stored rows kept in process (a row's body never changes).
_IDENTITY_MEMO_LIMIT = 4096

# Built once: a statement object reused keeps its compiled form and cache key.
_RECENT = (
    select(messages.c.id, messages.c.body)
    .where(
        messages.c.token_id == bindparam("token_id"),
        messages.c.user_id == bindparam("user_id"),
        messages.c.session_id == bindparam("session_id"),
    )
    .order_by(messages.c.id.desc())
    .limit(bindparam("limit"))
)
_APPEND = insert(messages)


@dataclass(frozen=True, slots=True)
class StoredMessage:
    message: Message
    identity: str  # Message.identity() of `message`
    tokens: int  # its text's token count, for the history budget


class SessionRepository:
    def __init__(self, db: Database) -> None:
        self._db = db
        # row id -> (hash(body), identity digest, tokens): a row's body never changes.
        self._identities: dict[int, tuple[int, str, int]] = {}

    async def recent(self, scope: Scope, limit: int) -> list[Message]:
        return [s.message for s in await self.window(scope, limit)]

    async def window(self, scope: Scope, limit: int) -> list[StoredMessage]:
        """The last `limit` stored messages of the scope, oldest first, with their identities.

        Rows are the proxy's own writes: each is parsed straight from its JSON, and its
        identity digest is computed once per process, not on every request.
        """
        params = {
            "token_id": scope.token_id,
            "user_id": scope.user,
            "session_id": scope.session,
            "limit": limit,
        }

        def read(conn: Connection) -> Sequence[Any]:
            return conn.execute(_RECENT, params).all()

        rows = await self._db.run(read)
        memo = self._identities
        window = []
        for row_id, body in reversed(rows):
            msg = _parse(body)
            key = hash(body)
            known = memo.get(row_id)
            if known is not None and known[0] == key:
                _, identity, tokens = known
            else:
                identity, tokens = msg.identity(), message_tokens(msg)
                if len(memo) >= _IDENTITY_MEMO_LIMIT:
                    memo.clear()
                memo[row_id] = (key, identity, tokens)
            window.append(StoredMessage(msg, identity, tokens))
        return window

    async def append(self, scope: Scope, items: Sequence[Message]) -> None:
        if not items:
            return
        rows = [
            {
                "token_id": scope.token_id,
                "user_id": scope.user,
                "session_id": scope.session,
                "role": m.role,
                "body": json.dumps(stored_form(m), ensure_ascii=False),
            }
            for m in items
        ]

        def write(conn: Connection) -> None:
            conn.execute(_APPEND, rows)

        await self._db.write(write)

    async def purge(self, token_id: int) -> None:
        async with self._db.begin() as s:
            await s.execute(delete(messages).where(messages.c.token_id == token_id))
        self._identities.clear()


def _parse(body: str) -> Message:
    try:
        return Message.model_validate_json(body)
    except ValidationError:  # what `json` accepts beyond strict JSON (NaN): the slow way
        return Message.model_validate(json.loads(body))


def message_tokens(msg: Message) -> int:
    """What a message costs in a prompt, roughly: its text and its tool calls' arguments."""
    calls = "".join(
        str((c.get("function") or {}).get("arguments", "")) for c in msg.tool_calls or []
    )
    return count_tokens(msg.text()) + count_tokens(calls)


def stored_form(msg: Message) -> dict[str, Any]:
    data = msg.model_dump(include=set(_KEPT_FIELDS), exclude_none=True)
    data.setdefault("content", None)
    return data
