"""Which vector shard a token's layer uses: its generation, and the rebuild filling the next.

A shard is named by its `ShardKey` (token, model id, dims). Generation 0 of an embedder is the
shard named by the model id alone (what every token had before rebuilds existed); generation n
adds `@g<n>` to the model id, so a rebuild or a re-embed fills a NEW shard while recall keeps
reading the active one, and one row update switches them (`lifecycle.rebuild`).

No row for a token means generation 0 of its current embedder. A row says which shard is
active and, while it differs from the token's config (a re-embed under way), the sealed spec of
the embedder its vectors were made with, so queries keep matching them. While a rebuild runs,
new turns are written to both shards (`ShardPlan.writes`); the rebuild replays the log up to
the switch, so nothing said meanwhile is missing from either.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from memory_bridge.embedding.embedders import EmbedderSpec
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import vector_generations as table
from memory_bridge.tenancy.encryption import SecretCipher, UndecryptableSecret

EPISODIC = "episodic"
LONGTERM = "longterm"
IDLE, RUNNING, FAILED = "idle", "running", "failed"
_SUFFIX = "@g"


def shard_model(model_id: str, generation: int) -> str:
    return model_id if generation == 0 else f"{model_id}{_SUFFIX}{generation}"


def base_model(shard: str) -> str:
    head, sep, tail = shard.rpartition(_SUFFIX)
    return head if sep and tail.isdigit() else shard


@dataclass(frozen=True, slots=True)
class Generation:
    token_id: int
    layer: str
    active_model: str
    active_dims: int
    embedder: str | None  # sealed JSON of the active shard's embedder, or None: the config's
    generation: int  # the highest generation number used so far
    state: str
    target_model: str | None
    target_dims: int | None
    reason: str | None
    event_id: str | None
    checkpoint: int
    done: int
    total: int
    error: str | None
    updated_at: float

    def reindex(self) -> dict[str, Any]:
        """What the admin API shows (never the embedder: it holds a key)."""
        return {
            "state": self.state,
            "reason": self.reason,
            "done": self.done,
            "total": self.total,
            "active": {"model": self.active_model, "dims": self.active_dims},
            "target": None
            if self.target_model is None
            else {"model": self.target_model, "dims": self.target_dims},
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class ShardTarget:
    spec: EmbedderSpec  # embeds texts and queries for this shard
    model_id: str
    dims: int


@dataclass(frozen=True, slots=True)
class ShardPlan:
    read: ShardTarget
    writes: tuple[ShardTarget, ...]


# -- rows (sync, inside a Database unit) -------------------------------------------------------


def read(conn: Connection, token_id: int, layer: str) -> Generation | None:
    row = conn.execute(
        select(table).where(table.c.token_id == token_id, table.c.layer == layer)
    ).first()
    return None if row is None else Generation(**row._asdict())


def start(
    conn: Connection,
    token_id: int,
    layer: str,
    *,
    active_model: str,
    active_dims: int,
    sealed_embedder: str | None,
    target_model_id: str,
    target_dims: int,
    reason: str,
    event_id: str,
) -> Generation:
    """Record a rebuild into the next generation (replacing any unfinished one)."""
    current = read(conn, token_id, layer)
    # `generation` is the highest number ever used: an unfinished target's is never reused
    # (its shard may still hold points).
    generation = (current.generation if current else 0) + 1
    values: dict[str, Any] = {
        "active_model": active_model,
        "active_dims": active_dims,
        "embedder": sealed_embedder,
        "generation": generation,
        "state": RUNNING,
        "target_model": shard_model(target_model_id, generation),
        "target_dims": target_dims,
        "reason": reason,
        "event_id": event_id,
        "checkpoint": 0,
        "done": 0,
        "total": 0,
        "error": None,
        "updated_at": time.time(),
    }
    if current is None:
        conn.execute(insert(table).values(token_id=token_id, layer=layer, **values))
    else:
        conn.execute(
            update(table).where(table.c.token_id == token_id, table.c.layer == layer).values(values)
        )
    found = read(conn, token_id, layer)
    assert found is not None
    return found


def _mine(token_id: int, layer: str, event_id: str) -> Any:
    return (
        (table.c.token_id == token_id)
        & (table.c.layer == layer)
        & (table.c.event_id == event_id)
        & (table.c.state == RUNNING)
    )


def record_progress(
    conn: Connection,
    token_id: int,
    layer: str,
    event_id: str,
    checkpoint: int,
    done: int,
    total: int,
) -> bool:
    """False when the rebuild was superseded (another one started): it must stop."""
    result = conn.execute(
        update(table)
        .where(_mine(token_id, layer, event_id))
        .values(checkpoint=checkpoint, done=done, total=total, updated_at=time.time())
    )
    return bool(result.rowcount)


def switch(conn: Connection, token_id: int, layer: str, event_id: str) -> Generation | None:
    """Make the target the active shard, in one update; None if superseded. Returns the row
    as it was before (its active shard is the one to drop)."""
    before = read(conn, token_id, layer)
    if before is None or before.event_id != event_id or before.state != RUNNING:
        return None
    assert before.target_model is not None and before.target_dims is not None
    conn.execute(
        update(table)
        .where(_mine(token_id, layer, event_id))
        .values(
            active_model=before.target_model,
            active_dims=before.target_dims,
            embedder=None,
            state=IDLE,
            target_model=None,
            target_dims=None,
            done=before.total,
            error=None,
            updated_at=time.time(),
        )
    )
    return before


def fail(conn: Connection, token_id: int, layer: str, event_id: str, error: str) -> bool:
    result = conn.execute(
        update(table)
        .where(_mine(token_id, layer, event_id))
        .values(state=FAILED, error=error[:300], updated_at=time.time())
    )
    return bool(result.rowcount)


def purge(conn: Connection, token_id: int) -> None:
    conn.execute(delete(table).where(table.c.token_id == token_id))


# -- the cached view recall uses ---------------------------------------------------------------


class Generations:
    """Reads the rows, decodes sealed embedders, and plans which shards to read and write.

    Recall uses a per-process cache (`ttl` seconds, dropped at once by `invalidate` in this
    process); after-turn jobs read the row afresh, so a write never misses a running rebuild.
    """

    def __init__(self, db: Database, cipher: SecretCipher, ttl: float) -> None:
        self._db = db
        self._cipher = cipher
        self._ttl = ttl
        self._cache: dict[tuple[int, str], tuple[float, Generation | None]] = {}

    def seal(self, spec: EmbedderSpec) -> str:
        return json.dumps(self._cipher.seal(spec.to_json()), separators=(",", ":"))

    def unseal(self, sealed: str) -> EmbedderSpec:
        return EmbedderSpec.from_json(self._cipher.open(json.loads(sealed)))

    def seal_data(self, data: dict[str, Any]) -> str:
        """Any config-shaped data (the long-term layer's instance fields), its keys sealed."""
        return json.dumps(self._cipher.seal(data), separators=(",", ":"))

    def unseal_data(self, sealed: str) -> dict[str, Any]:
        found = self._cipher.open(json.loads(sealed))
        if not isinstance(found, dict):
            raise ValueError("sealed data is not an object")
        return found

    async def purge(self, token_id: int) -> None:
        await self._db.write(lambda conn: purge(conn, token_id))
        self.invalidate(token_id)

    def invalidate(self, token_id: int) -> None:
        for key in [k for k in self._cache if k[0] == token_id]:
            self._cache.pop(key, None)

    async def get(self, token_id: int, layer: str, *, fresh: bool = False) -> Generation | None:
        key = (token_id, layer)
        now = time.monotonic()
        cached = self._cache.get(key)
        if not fresh and cached is not None and cached[0] > now:
            return cached[1]
        found = await self._db.run(lambda conn: read(conn, token_id, layer))
        self._cache[key] = (now + self._ttl, found)
        return found

    async def plan(
        self, token_id: int, current: EmbedderSpec, *, fresh: bool = False, layer: str = EPISODIC
    ) -> ShardPlan:
        row = await self.get(token_id, layer, fresh=fresh)
        return self.plan_of(row, current)

    def plan_of(self, row: Generation | None, current: EmbedderSpec) -> ShardPlan:
        own = ShardTarget(current, current.model_id, current.dims)
        if row is None:
            return ShardPlan(read=own, writes=(own,))
        active = self._active(row, current)
        if active is None:
            # The row does not describe the config's embedder (changed without a re-embed):
            # never query a shard with vectors of another model; its generation 0 instead.
            return ShardPlan(read=own, writes=(own,))
        writes = [active]
        if (
            row.state == RUNNING
            and row.target_model is not None
            and base_model(row.target_model) == current.model_id
            and row.target_dims == current.dims
            and row.target_model != active.model_id
        ):
            writes.append(ShardTarget(current, row.target_model, current.dims))
        return ShardPlan(read=active, writes=tuple(writes))

    def _active(self, row: Generation, current: EmbedderSpec) -> ShardTarget | None:
        if row.embedder is not None:
            try:
                spec = self.unseal(row.embedder)
            except (UndecryptableSecret, ValueError, KeyError, TypeError):
                return None
        else:
            spec = current
        if base_model(row.active_model) != spec.model_id or row.active_dims != spec.dims:
            return None
        return ShardTarget(spec, row.active_model, row.active_dims)
