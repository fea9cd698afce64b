"""Which token created each stored Responses API response.

Tokens may share an upstream API key, and the upstream keeps every response it stored under
that key: without this record any of them could read, continue or delete another's. The proxy
records the id of every response it relays (`chat.response_claims`) and answers only its
creator on the paths that name one; an id it never relayed (created before this record existed,
or at the provider directly) belongs to nobody here and is answered 404 (docs/decisions.md).

One lookup is a primary-key seek on (token, id); a request that names no id costs nothing.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from sqlalchemy import Connection, delete, select
from sqlalchemy.dialects import postgresql, sqlite

from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import response_owners

MAX_ID = 200
# Provider ids are `resp_` and letters, digits, `_`/`-`: anything else is never one the proxy
# recorded, and a path segment with escapes or dots could reach a different upstream path.
_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_ID}}}")
NO_INSTRUCTIONS = -1  # the client sent no `instructions` (the proxy's are the whole field)


def is_response_id(value: object) -> bool:
    return isinstance(value, str) and _ID.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class Ownership:
    """A token's own response. `instructions`: None when the proxy left the request's
    `instructions` as they were; else how many of the echoed characters are the client's
    (`NO_INSTRUCTIONS`: none, the echo is null to the client)."""

    instructions: int | None


class ResponseOwners:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def lookup(self, token_id: int, response_id: str) -> Ownership | None:
        """The token's record of `response_id`; None when it did not create it."""
        if not is_response_id(response_id):
            return None
        table = response_owners
        query = select(table.c.instructions).where(
            table.c.token_id == token_id, table.c.response_id == response_id
        )

        def read(conn: Connection) -> Ownership | None:
            row = conn.execute(query).first()
            return None if row is None else Ownership(row[0])

        return await self._db.run(read)

    async def record(self, token_id: int, response_id: str, instructions: int | None) -> bool:
        """Record that the token created `response_id` (again: no change); False for an id
        that is not one (`is_response_id`), which is then nobody's."""
        if not is_response_id(response_id):
            return False
        row = {
            "token_id": token_id,
            "response_id": response_id,
            "created_at": time.time(),
            "instructions": instructions,
        }

        def write(conn: Connection) -> None:
            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            conn.execute(dialect.insert(response_owners).values(row).on_conflict_do_nothing())

        await self._db.write(write)
        return True

    async def forget(self, token_id: int, response_id: str) -> None:
        """The response was deleted upstream: its record goes too."""
        table = response_owners
        statement = delete(table).where(
            table.c.token_id == token_id, table.c.response_id == response_id
        )
        await self._db.write(lambda conn: conn.execute(statement))


def purge(conn: Connection, token_id: int) -> None:
    """Every record of the token (its purge)."""
    conn.execute(delete(response_owners).where(response_owners.c.token_id == token_id))
