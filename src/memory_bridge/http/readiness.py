"""Ready when ready: what a serving process loads before it answers at full speed, loaded at
start-up rather than by the first request that needs it (the local embedding model took ~7 s
on first use), and `GET /ready` saying whether it is done.

`/health` stays liveness (the process answers, storage takes writes); `/ready` is 503 until the
warm-up is over, for a load balancer to hold traffic back meanwhile. Requests are served all
along: a request that comes early loads what it needs itself, as before. A warm-up that fails
is logged and ends the wait (what failed loads on first use, or fails there as it would have).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import Connection, select

from memory_bridge.embedding.embedders import Embedders, default_spec
from memory_bridge.settings import Settings
from memory_bridge.sources.services import MemoryServices
from memory_bridge.storage.tables import tokens
from memory_bridge.vectors.index import VectorEngine

log = logging.getLogger(__name__)


@dataclass
class Readiness:
    ready: bool = False
    waiting_for: str = "start-up"
    warmed: dict[str, object] = field(default_factory=dict)

    def body(self) -> dict[str, object]:
        if self.ready:
            return {"status": "ready", "warmed": self.warmed}
        return {"status": "warming", "waiting_for": self.waiting_for}


class Startable(Protocol):
    """What starts on first use unless the warm-up starts it (the MCP endpoint)."""

    async def start(self) -> object: ...


async def warm_up(
    runtime: MemoryServices,
    settings: Settings,
    readiness: Readiness,
    mcp: Startable | None = None,
) -> None:
    try:
        await _warm_model(runtime, settings, readiness)
        readiness.waiting_for = "vector shards"
        ids = await runtime.db.run(_recent_tokens(settings.ready_warm_shards))
        limit, vectors = _warm_limit(settings), runtime.vectors
        opened = await runtime.vector_threads.run(lambda: open_shards(vectors, ids, limit))
        readiness.warmed["shards"] = opened
        if mcp is not None:
            readiness.waiting_for = "the MCP endpoint"
            await mcp.start()
    except Exception as exc:
        log.error(
            "warm-up failed (%s): what it did not load loads on first use", type(exc).__name__
        )
    readiness.ready = True
    log.info("MemoryBridge ready to serve at full speed (GET /ready: 200)")


async def _warm_model(runtime: MemoryServices, settings: Settings, readiness: Readiness) -> None:
    """The install's default embedder (every token without one of its own uses it)."""
    spec = default_spec(settings.episodic_default_embedder)
    if not settings.episodic_memory or spec.local is None:
        return
    readiness.waiting_for = "the local embedding model"
    await Embedders(runtime.client, runtime.vector_threads).embed(spec, ["warm-up"])
    readiness.warmed["model"] = spec.model_id


def _warm_limit(settings: Settings) -> int:
    """Shards beyond the embedded engine's bound of open ones would only close others."""
    bound = settings.vector_max_open_shards
    if settings.resolved_qdrant_url or not bound:
        return settings.ready_warm_shards
    return min(settings.ready_warm_shards, bound)


def _recent_tokens(limit: int) -> Callable[[Connection], list[int]]:
    def work(conn: Connection) -> list[int]:
        query = select(tokens.c.id).where(tokens.c.is_admin.is_(False))
        return list(conn.execute(query.order_by(tokens.c.id.desc()).limit(limit)).scalars())

    return work


def open_shards(vectors: VectorEngine, token_ids: list[int], limit: int) -> int:
    """Open the existing shards of `token_ids`, at most `limit` of them; how many."""
    opened = 0
    for token_id in token_ids:
        for key in vectors.shards(token_id):
            if opened >= limit:
                return opened
            if vectors.existing(token_id, key.model_id, key.dims) is not None:
                opened += 1
    return opened
