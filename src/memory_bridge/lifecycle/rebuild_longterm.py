"""Rebuild a token's Mem0 facts from their `longterm.*` events, into a new shard generation.

No LLM call: the facts are in the log. Each `longterm.retained`/`updated`/`restored` event sets
a fact's text (by its memory id), each `longterm.deleted`/`merged`/`superseded` removes it, a
`user.erased` removes the end user's; replayed in log order they give the live facts, whose
texts are embedded with the token's Mem0 embedder into the target shard (`mem0:<model>@g<n>`)
through a Mem0 instance the pool does not keep. The points are what Mem0 itself writes
(`points`): same ids, `data`, `hash`, `user_id`, times, the turn's event id — so Mem0's search,
update and delete work on the rebuilt shard as before. Every state is absolute (a text, or
gone), so replaying any suffix of the log again is harmless: the job checkpoints after every
page and resumes there.

Meanwhile Mem0 keeps reading and writing the active shard, and each of its changes lands in the
log; after the switch a last pass replays what came after the checkpoint, and another one after
the grace period (an add that had bound the old instance just before the switch has logged its
changes by then), before the old shard is dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, select

from memory_bridge.events import log as event_log
from memory_bridge.events.model import EventType, StoredEvent
from memory_bridge.events.queue import Job
from memory_bridge.lifecycle.generation_pass import replay_and_switch
from memory_bridge.sources.base import JobStep, PermanentFailure
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.config import Mem0Spec
from memory_bridge.sources.longterm.points import ENTITY_KIND, EVENT_ID_KEY, MEMORY_KIND
from memory_bridge.sources.longterm.shards import on_shard
from memory_bridge.sources.vector_generations import LONGTERM, RUNNING, Generation
from memory_bridge.sources.vector_generations import fail as fail_row
from memory_bridge.storage.tables import memory_events
from memory_bridge.vectors.index import Where

if TYPE_CHECKING:
    from memory_bridge.sources.services import MemoryServices

log = logging.getLogger(__name__)

PAGE = 200
FACT_TYPES = (
    EventType.LONGTERM_RETAINED.value,
    EventType.LONGTERM_UPDATED.value,
    EventType.LONGTERM_DELETED.value,
    EventType.LONGTERM_MERGED.value,
    EventType.LONGTERM_SUPERSEDED.value,
    EventType.LONGTERM_RESTORED.value,
)
# A merged or superseded fact leaves the live facts (its words stay in its event).
_GONE = (EventType.LONGTERM_DELETED, EventType.LONGTERM_MERGED, EventType.LONGTERM_SUPERSEDED)
_REPLAYED = (*FACT_TYPES, EventType.USER_ERASED.value)


@dataclass(frozen=True, slots=True)
class Fact:
    user: str
    text: str
    updated_at: str
    created_at: str | None  # None: an update whose creation is in an earlier page
    source_event_id: str | None


# A page folded: per memory id its last state (a fact, or None: deleted), and end users erased.
Changes = tuple[dict[str, Fact | None], list[str]]


def fold(events: list[StoredEvent]) -> Changes:
    facts: dict[str, Fact | None] = {}
    erased: list[str] = []
    for event in events:
        data = event.payload
        when = event.created_at.isoformat()
        if event.type == EventType.USER_ERASED:
            user = data.get("user")
            if isinstance(user, str):
                erased.append(user)
                facts = {k: v for k, v in facts.items() if v is None or v.user != user}
            continue
        memory_id, user, text = data.get("memory_id"), data.get("user"), data.get("text")
        if not isinstance(memory_id, str) or not isinstance(user, str):
            continue  # content erased: nothing to restore
        if event.type in _GONE or not isinstance(text, str):
            facts[memory_id] = None
            continue
        before = facts.get(memory_id)
        if event.type == EventType.LONGTERM_RETAINED:
            created: str | None = when
        elif event.type == EventType.LONGTERM_RESTORED:
            learned = data.get("created_at")  # a restored fact keeps its first date
            created = learned if isinstance(learned, str) else None
        else:
            created = before.created_at if before is not None else None
        source = data.get("source_event_id")
        facts[memory_id] = Fact(
            user, text, when, created, source if isinstance(source, str) else None
        )
    return facts, erased


def apply(memory: Any, token_id: int, changes: Changes) -> int:
    """Write a folded page into the instance's shard (blocking: Mem0's thread pool). Returns
    how many facts were written."""
    facts, erased = changes
    store = memory.vector_store
    for user in erased:
        store.index.delete_where(Where(user=user, kind=(MEMORY_KIND, ENTITY_KIND)))
    if erased:
        store.index.compact()  # the erased payloads leave the new generation's files too
    gone = [memory_id for memory_id, fact in facts.items() if fact is None]
    if gone:
        store.index.delete(gone)
    live = [(memory_id, fact) for memory_id, fact in facts.items() if fact is not None]
    if not live:
        return 0
    vectors = _embed(memory, [fact.text for _, fact in live])
    payloads = []
    for memory_id, fact in live:
        created = fact.created_at
        if created is None:
            found = store.get(memory_id)
            created = found.payload.get("created_at") if found is not None else None
        payload: dict[str, Any] = {
            "data": fact.text,
            # Mem0's dedup key, computed as Mem0 computes it (not a security hash).
            "hash": hashlib.md5(fact.text.encode(), usedforsecurity=False).hexdigest(),
            "user_id": mem0_config.namespace(token_id, fact.user),
            "created_at": created or fact.updated_at,
            "updated_at": fact.updated_at,
        }
        if fact.source_event_id:
            payload[EVENT_ID_KEY] = fact.source_event_id
        payloads.append(payload)
    store.insert(vectors, payloads, [memory_id for memory_id, _ in live])
    return len(live)


def _embed(memory: Any, texts: list[str]) -> list[Any]:
    model = memory.embedding_model
    vectors = model.embed_batch(texts, "add")
    if len(vectors) != len(texts):
        raise RuntimeError("the embedder answered another number of vectors")
    return list(vectors)


async def run_longterm(
    runtime: MemoryServices, job: Job, event: StoredEvent, progress: JobStep, grace: float
) -> None:
    """The `rebuild` job of the long-term layer."""
    generations = runtime.generations
    if generations is None:
        raise PermanentFailure("no vector generations on this install")
    token_id, pool = event.token_id, runtime.longterm.pool
    row = await generations.get(token_id, LONGTERM, fresh=True)
    if row is None or row.event_id != event.event_id or row.state != RUNNING:
        return  # superseded by a later request, or already switched
    target = await _target(runtime, job, event, row)
    if target is None:
        return
    memory = await pool.detached(target)
    try:

        async def replay(after: int, limit: int | None) -> tuple[int | None, int]:
            page = await runtime.db.run(partial(_page, token_id=token_id, after=after, limit=limit))
            if not page:
                return None, 0
            changes = fold(page)
            await pool.on_detached(target, memory, lambda m: apply(m, token_id, changes))
            return page[-1].id, len(page)

        total = await runtime.db.run(lambda c: _count(c, token_id))
        switched = await replay_and_switch(
            runtime.db,
            progress,
            row=row,
            layer=LONGTERM,
            total=total,
            page_size=PAGE,
            replay=replay,
        )
        generations.invalidate(token_id)
        pool.invalidate(token_id)  # the next call binds the new generation
        if switched is None:
            return  # superseded: the newer request's job takes over
        before, checkpoint = switched.before, switched.checkpoint
        await replay(checkpoint, None)
        log.info("token %d: long-term facts rebuilt into %s", token_id, target.model_id)
        if (before.active_model, before.active_dims) == (target.model_id, target.dims):
            return
        await asyncio.sleep(grace)
        await replay(checkpoint, None)
    finally:
        pool.close_detached(memory)
    await runtime.vector_threads.run(
        lambda: runtime.vectors.drop_shard(token_id, before.active_model, before.active_dims)
    )


async def _target(
    runtime: MemoryServices, job: Job, event: StoredEvent, row: Generation
) -> Mem0Spec | None:
    """The shard the rebuild writes, as the token's stored config names it; None: the token
    is gone. A config that names another embedder fails the rebuild (after retries: the new
    config may not be stored yet when a re-embed starts just before)."""
    token_id = event.token_id
    record = await runtime.tokens.get(token_id)
    if record is None or record.config is None:
        return None
    if not mem0_config.enabled(record.config):
        await runtime.db.write(
            lambda c: fail_row(c, token_id, LONGTERM, event.event_id, "long-term memory is off")
        )
        raise PermanentFailure("the token has no long-term memory")
    current = mem0_config.build_spec(token_id, record.config, runtime.longterm.pool.mem0_dir)
    assert row.target_model is not None and row.target_dims is not None
    target = on_shard(current, row.target_model, row.target_dims)
    if target is None:
        if job.attempts < runtime.settings.job_max_attempts:
            raise RuntimeError("the token's embedder is not the rebuild's target (yet)")
        await runtime.db.write(
            lambda c: fail_row(c, token_id, LONGTERM, event.event_id, "embedder changed")
        )
        raise PermanentFailure("the token's embedder is not the rebuild's target")
    return target


def _count(conn: Connection, token_id: int) -> int:
    query = select(func.count()).where(
        memory_events.c.token_id == token_id, memory_events.c.type.in_(FACT_TYPES)
    )
    return int(conn.execute(query).scalar() or 0)


def _page(conn: Connection, token_id: int, after: int, limit: int | None) -> list[StoredEvent]:
    return event_log.read(conn, token_id=token_id, after=after, limit=limit, types=_REPLAYED)


def live_facts(conn: Connection, token_id: int) -> dict[str, Fact]:
    """The token's live facts by memory id: its whole `longterm.*` log replayed (a re-extract
    deletes exactly these)."""
    facts, _ = fold(_page(conn, token_id=token_id, after=0, limit=None))
    return {memory_id: fact for memory_id, fact in facts.items() if fact is not None}
