"""Rebuild and re-embed a token's episodic vectors from the event log, into a new shard.

`start_rebuild` records the request as an event (`index.rebuild_requested`) with one job of
the durable queue, and the target generation (`sources.vector_generations`) in the same
transaction. The job (`Rebuilder`, consumer `rebuild`) replays the token's `session.*` and
`user.erased` events in log order into the target shard — the same point ids and texts the
after-turn jobs wrote — checkpointing its place after every page, so a worker that dies or a
job that times out resumes where it stopped. Meanwhile recall reads the active shard and new
turns are written to both. When the log is exhausted one row update switches the shards; a
last pass takes the turns recorded since; the old shard is dropped after a grace period (the
other processes' cache of the active shard expires first).

A re-embed is the same rebuild into a shard of the token's NEW embedder, started when a PATCH
changes it (`lifecycle.reembed`); until the switch, queries use the old embedder's sealed spec.

The long-term layer (Mem0's facts) is rebuilt the same way from its `longterm.*` events, with
no LLM call (`lifecycle.rebuild_longterm`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, select

from memory_bridge.core.errors import ProxyError
from memory_bridge.embedding.embedders import EmbedderSpec
from memory_bridge.events import log as event_log
from memory_bridge.events import queue
from memory_bridge.events.model import EventType, NewEvent, StoredEvent, index_aggregate
from memory_bridge.events.queue import Job
from memory_bridge.lifecycle.generation_pass import replay_and_switch
from memory_bridge.lifecycle.rebuild_longterm import run_longterm
from memory_bridge.sources.base import JobStep, PermanentFailure
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.config import Mem0Spec
from memory_bridge.sources.longterm.shards import instance_fields, resolve
from memory_bridge.sources.replay import rebuild_exchange
from memory_bridge.sources.summaries import summary_point
from memory_bridge.sources.vector_generations import (
    EPISODIC,
    LONGTERM,
    RUNNING,
    Generation,
    ShardTarget,
    base_model,
)
from memory_bridge.sources.vector_generations import fail as fail_row
from memory_bridge.sources.vector_generations import read as read_row
from memory_bridge.sources.vector_generations import start as start_row
from memory_bridge.storage.tables import memory_events
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.vectors.index import Where

if TYPE_CHECKING:
    from memory_bridge.sources.services import MemoryServices

log = logging.getLogger(__name__)

REBUILD = "rebuild"  # the job queue's consumer name
LAYERS = (EPISODIC, LONGTERM)
ALL = "all"
PAGE = 200  # events per checkpoint
_REPLAYED = (
    EventType.SESSION_APPENDED.value,
    EventType.MEMORY_ADDED.value,  # a fact added through MCP (a deleted one's row is gone)
    EventType.SESSION_SUMMARISED.value,
    EventType.SESSION_DELETED.value,
    EventType.USER_ERASED.value,
)


def _episodic_parts(runtime: MemoryServices) -> tuple[Any, Any]:
    episodic, generations = runtime.episodic, runtime.generations
    if episodic is None or generations is None or not runtime.settings.episodic_memory:
        raise ProxyError(409, "conflict_error", "Episodic memory is off on this install.")
    return episodic, generations


async def start_rebuild(
    runtime: MemoryServices,
    token_id: int,
    layer: str,
    *,
    reason: str = "rebuild",
    old_spec: EmbedderSpec | None = None,
    new_config: TokenConfig | None = None,
    wake: Callable[[], None] | None = None,
    old_config: TokenConfig | None = None,
) -> Generation:
    """Record a rebuild of the token's `layer` as a job; 409 if one is already running
    (a re-embed replaces a running one: the embedder changed again). A re-embed is started
    before the new config (`new_config`) is stored, so recall never sees the new embedder
    without the generation that keeps it on the old shard."""
    if layer == LONGTERM:
        return await _start_longterm(runtime, token_id, reason, old_config, new_config, wake)
    if layer != EPISODIC:
        raise ProxyError(400, "invalid_request_error", f"Unknown layer {layer!r}.")
    episodic, generations = _episodic_parts(runtime)
    record = await runtime.tokens.get(token_id)
    if record is None:
        raise ProxyError(404, "not_found_error", f"No token with id {token_id}.")
    config = new_config or record.config
    if config is None:
        raise ProxyError(409, "conflict_error", "The token's stored config is unusable.")
    current: EmbedderSpec = episodic.embedder(config)
    aggregate = index_aggregate(token_id, layer)

    def work(conn: Connection) -> Generation:
        row = read_row(conn, token_id, layer)
        if row is not None and row.state == RUNNING and reason == "rebuild":
            raise ProxyError(409, "conflict_error", "A rebuild of this layer is already running.")
        active: ShardTarget = generations.plan_of(row, old_spec or current).read
        sealed = None if active.spec == current else generations.seal(active.spec)
        payload = {"layer": layer, "reason": reason, "model": current.model_id}
        event = NewEvent(EventType.INDEX_REBUILD_REQUESTED, aggregate, payload)
        event_log.append(conn, token_id, [event])
        queue.enqueue(conn, event.event_id, token_id, aggregate, [REBUILD])
        return start_row(
            conn,
            token_id,
            layer,
            active_model=active.model_id,
            active_dims=active.dims,
            sealed_embedder=sealed,
            target_model_id=current.model_id,
            target_dims=current.dims,
            reason=reason,
            event_id=event.event_id,
        )

    started = await event_log.write_appending(runtime.db, work)
    generations.invalidate(token_id)
    log.info("token %d: %s of the %s layer started", token_id, reason, layer)
    if wake is not None:
        wake()
    return started


async def _longterm_target(
    runtime: MemoryServices, token_id: int, new_config: TokenConfig | None
) -> tuple[TokenConfig, Mem0Spec]:
    """The config a long-term rebuild follows and the shard it writes; 404/409 when there is
    none to rebuild."""
    record = await runtime.tokens.get(token_id)
    if record is None:
        raise ProxyError(404, "not_found_error", f"No token with id {token_id}.")
    config = new_config or record.config
    if config is None or not mem0_config.enabled(config):
        raise ProxyError(409, "conflict_error", "The token has no long-term memory.")
    try:
        return config, mem0_config.build_spec(token_id, config, runtime.longterm.pool.mem0_dir)
    except mem0_config.Mem0ConfigError as exc:
        raise ProxyError(409, "conflict_error", f"The token's long-term memory: {exc}") from exc


async def _start_longterm(
    runtime: MemoryServices,
    token_id: int,
    reason: str,
    old_config: TokenConfig | None,
    new_config: TokenConfig | None,
    wake: Callable[[], None] | None,
) -> Generation:
    """The long-term layer's rebuild (`lifecycle.rebuild_longterm`): its target is a new
    generation of the token's Mem0 shard. A re-embed (`old_config`) keeps the old config's
    instance fields sealed in the row, so Mem0 stays on the old embedder and shard until the
    switch (`sources.longterm.shards`)."""
    generations = runtime.generations
    if generations is None:
        raise ProxyError(409, "conflict_error", "Rebuilds are not available on this install.")
    config, current = await _longterm_target(runtime, token_id, new_config)
    mem0_dir = runtime.longterm.pool.mem0_dir
    aggregate = index_aggregate(token_id, LONGTERM)

    def work(conn: Connection) -> Generation:
        row = read_row(conn, token_id, LONGTERM)
        if row is not None and row.state == RUNNING and reason == "rebuild":
            raise ProxyError(409, "conflict_error", "A rebuild of this layer is already running.")
        basis = old_config or config
        active = resolve(row, token_id, basis, mem0_dir, generations.unseal_data)
        sealed = active.sealed
        if old_config is not None and sealed is None:
            sealed = generations.seal_data(instance_fields(old_config))
        payload = {"layer": LONGTERM, "reason": reason, "model": current.model_id}
        event = NewEvent(EventType.INDEX_REBUILD_REQUESTED, aggregate, payload)
        event_log.append(conn, token_id, [event])
        queue.enqueue(conn, event.event_id, token_id, aggregate, [REBUILD])
        return start_row(
            conn,
            token_id,
            LONGTERM,
            active_model=active.spec.model_id,
            active_dims=active.spec.dims,
            sealed_embedder=sealed,
            target_model_id=current.model_id,
            target_dims=current.dims,
            reason=reason,
            event_id=event.event_id,
        )

    started = await event_log.write_appending(runtime.db, work)
    generations.invalidate(token_id)
    runtime.longterm.pool.invalidate(token_id)
    log.info("token %d: %s of the longterm layer started", token_id, reason)
    if wake is not None:
        wake()
    return started


async def layers_of(runtime: MemoryServices, token_id: int, layer: str) -> list[str]:
    """The layers `layer` names: itself, or for `all` those the token has (404: no token)."""
    if layer != ALL:
        return [layer]
    record = await runtime.tokens.get(token_id)
    if record is None:
        raise ProxyError(404, "not_found_error", f"No token with id {token_id}.")
    wanted = []
    if runtime.episodic is not None and runtime.settings.episodic_memory:
        wanted.append(EPISODIC)
    if record.config is not None and mem0_config.enabled(record.config):
        wanted.append(LONGTERM)
    if not wanted:
        raise ProxyError(409, "conflict_error", "The token has no layer to rebuild.")
    return wanted


async def reindex_state(runtime: MemoryServices, token_id: int) -> dict[str, Any] | None:
    """The token's rebuild state per layer, for its admin detail (None: never rebuilt)."""
    if runtime.generations is None:
        return None
    out: dict[str, Any] = {}
    for layer in LAYERS:
        row = await runtime.generations.get(token_id, layer, fresh=True)
        if row is not None:
            out[layer] = row.reindex()
    return out or None


class Rebuilder:
    """The `rebuild` consumer of the job queue."""

    name = REBUILD
    cancel_safe = True  # every step is idempotent and checkpointed
    # A rebuild runs as long as the log is long; its lease is renewed at every checkpoint.
    job_timeout: float | None = None

    def __init__(self, runtime: MemoryServices, *, grace: float | None = None) -> None:
        self._runtime = runtime
        self._grace = runtime.settings.token_cache_ttl + 1.0 if grace is None else grace

    async def run(self, job: Job, event: StoredEvent, progress: JobStep) -> None:
        if event.payload.get("layer") == LONGTERM:
            await run_longterm(self._runtime, job, event, progress, self._grace)
            return
        if event.payload.get("layer") != EPISODIC:
            raise PermanentFailure(f"unknown layer {event.payload.get('layer')!r}")
        runtime = self._runtime
        episodic, generations = _episodic_parts(runtime)
        token_id = event.token_id
        row = await generations.get(token_id, EPISODIC, fresh=True)
        if row is None or row.event_id != event.event_id or row.state != RUNNING:
            return  # superseded by a later request, or already switched
        record = await runtime.tokens.get(token_id)
        if record is None or record.config is None:
            return
        current: EmbedderSpec = episodic.embedder(record.config)
        assert row.target_model is not None and row.target_dims is not None
        if base_model(row.target_model) != current.model_id or row.target_dims != current.dims:
            # The new config may not be stored yet (a re-embed starts just before): retried.
            if job.attempts < runtime.settings.job_max_attempts:
                raise RuntimeError("the token's embedder is not the rebuild's target (yet)")
            await runtime.db.write(
                lambda c: fail_row(c, token_id, EPISODIC, event.event_id, "embedder changed")
            )
            raise PermanentFailure("the token's embedder is not the rebuild's target")
        target = ShardTarget(current, row.target_model, row.target_dims)
        config = record.config

        async def replay(after: int, limit: int | None) -> tuple[int | None, int]:
            page = await runtime.db.run(partial(_page, token_id=token_id, after=after, limit=limit))
            done = 0
            for stored in page:
                done += await self._replay(episodic, job, progress, stored, target, config)
            return (page[-1].id if page else None), done

        total = await runtime.db.run(lambda c: _count(c, token_id))
        switched = await replay_and_switch(
            runtime.db,
            progress,
            row=row,
            layer=EPISODIC,
            total=total,
            page_size=PAGE,
            replay=replay,
        )
        generations.invalidate(token_id)
        if switched is None:
            return  # superseded: the newer request's job takes over
        before, checkpoint, done = switched.before, switched.checkpoint, switched.done
        # Turns recorded between the last page and the switch went to both shards, unless their
        # job had not run yet: one more pass over what came after the checkpoint.
        await replay(checkpoint, None)
        log.info(
            "token %d: episodic vectors rebuilt into %s (%d turns)", token_id, target.model_id, done
        )
        if (before.active_model, before.active_dims) != (target.model_id, target.dims):
            await asyncio.sleep(self._grace)
            await self._drop(token_id, before.active_model, before.active_dims)

    async def _replay(
        self,
        episodic: Any,
        job: Job,
        progress: JobStep,
        stored: StoredEvent,
        target: ShardTarget,
        config: Any,
    ) -> int:
        data = stored.payload
        try:
            if stored.type == EventType.MEMORY_ADDED and data.get("layer") != EPISODIC:
                return 1  # kept by the long-term layer (its own rebuild re-embeds it)
            if stored.type in (EventType.SESSION_APPENDED, EventType.MEMORY_ADDED):
                exchange = rebuild_exchange(stored, config, job, progress)
                created = stored.created_at.timestamp()
                await episodic.index_exchange(exchange, (target,), created)
                return 1
            if stored.type == EventType.SESSION_SUMMARISED:
                point = summary_point(stored.token_id, stored.event_id, data)
                await episodic.index_summary_into(point, (target,))
                return 1
            where = Where(user=str(data["user"]), kind="episodic")
            if stored.type == EventType.SESSION_DELETED:
                where = Where(user=str(data["user"]), session=str(data["session"]), kind="episodic")
        except (KeyError, TypeError, ValueError):
            return 0  # an event whose content was erased: nothing to index
        index = await self._open(stored.token_id, target)

        def forget() -> None:
            # Compacted too: a page this rebuild read before an erasure (or a session's
            # delete) took the events away may have indexed them after the erasure's sweep;
            # the tombstone comes after them in the log, and the files must not keep them.
            if index.count(where):
                index.delete_where(where)
                index.compact()

        await self._runtime.vector_threads.run(forget)
        return 0

    async def _open(self, token_id: int, target: ShardTarget) -> Any:
        vectors = self._runtime.vectors
        return await self._runtime.vector_threads.run(
            lambda: vectors.index(token_id, target.model_id, target.dims)
        )

    async def _drop(self, token_id: int, model_id: str, dims: int) -> None:
        vectors = self._runtime.vectors
        await self._runtime.vector_threads.run(lambda: vectors.drop_shard(token_id, model_id, dims))


def _count(conn: Connection, token_id: int) -> int:
    query = select(func.count()).where(
        memory_events.c.token_id == token_id,
        memory_events.c.type.in_((EventType.SESSION_APPENDED.value, EventType.MEMORY_ADDED.value)),
    )
    return int(conn.execute(query).scalar() or 0)


def _page(
    conn: Connection, token_id: int, after: int, limit: int | None = PAGE
) -> list[StoredEvent]:
    return event_log.read(conn, token_id=token_id, after=after, limit=limit, types=_REPLAYED)
