"""Erasing one end user of a token from every memory layer, in one call.

Order matters twice. The database goes first, in one transaction (`erase_rows`): the user's
events and their pending jobs go together, so no worker can start indexing one of their turns
afterwards, and the tombstone is appended. The vector layers follow: the episodic index of every
shard the token has (every embedding model it used; each shard is compacted after the delete,
so the deleted payloads leave the files too) and the long-term memories (Mem0). A failure
there answers 5xx and a retry finishes the job: every step deletes by user, not by a list it
would have lost. A job that was already running when the rows went may still write its vectors;
the erasure waits for it (at most `MEMORY_STORE_TIMEOUT`) and sweeps the vector layers again.

A second call finds nothing and answers zero counts; it appends no tombstone (nothing was
erased) but is audited again, as every admin action is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from memory_bridge.events import log as event_log
from memory_bridge.lifecycle import erase_rows
from memory_bridge.runtime import Runtime
from memory_bridge.storage.traces import TraceStore
from memory_bridge.turn import Scope
from memory_bridge.vectors.index import ShardKey, Where

log = logging.getLogger(__name__)

_POLL = 0.2


@dataclass(frozen=True, slots=True)
class Erasure:
    """What one erasure removed, per layer (all zero: nothing of the user was left)."""

    counts: dict[str, int]
    longterm: str  # "erased", or "off" when the token has no long-term memory

    def as_json(self) -> dict[str, Any]:
        return {"counts": self.counts, "longterm": self.longterm}


async def erase_user(
    runtime: Runtime,
    token_id: int,
    user: str,
    *,
    traces: TraceStore | None = None,
    request_id: str = "",
) -> Erasure:
    """Erase `user` of `token_id` (the caller checked the token exists)."""
    if traces is not None:
        await traces.flush()  # a trace still queued would be written after the delete
    shards = await runtime.vector_threads.run(lambda: runtime.vectors.shards(token_id))
    episodic = await _count_points(runtime, shards, user)
    meta = {"source": "admin", "request_id": request_id}

    def work(conn: Any) -> erase_rows.RowsErased:
        return erase_rows.erase_rows(conn, token_id, user, {"episodic": episodic}, meta)

    found = await event_log.write_appending(runtime.db, work)
    runtime.curated.forget(token_id)
    await runtime.db.run(erase_rows.checkpoint)
    await _sweep_vectors(runtime, shards, user)
    longterm = await _erase_longterm(runtime, token_id, user)
    if found.running_jobs:
        await _after_running(runtime, token_id, user, found.running_jobs)
    counts = {**erase_rows.counts_of(found), "episodic": episodic}
    erasure = Erasure(counts=counts, longterm=longterm)
    await runtime.audit.record(
        Scope(token_id=token_id, user=user, session=""),
        erase_rows.AUDIT_TYPE,
        request_id,
        erasure.as_json(),
    )
    log.info(
        "token %d: an end user erased (%d events, %d vectors)", token_id, found.events, episodic
    )
    return erasure


async def _count_points(runtime: Runtime, shards: list[ShardKey], user: str) -> int:
    def count() -> int:
        return sum(
            runtime.vectors.index(k.token_id, k.model_id, k.dims).count(Where(user=user))
            for k in shards
        )

    return await runtime.vector_threads.run(count)


async def _sweep_vectors(runtime: Runtime, shards: list[ShardKey], user: str) -> None:
    """Delete the user's points of every shard, then rewrite the shards that held any, so the
    deleted payloads are gone from the files as well (the cost: a copy of the shard's other
    points; docs/operations.md)."""

    def sweep() -> None:
        for key in shards:
            index = runtime.vectors.index(key.token_id, key.model_id, key.dims)
            if index.count(Where(user=user)):
                index.delete_where(Where(user=user))
                index.compact()

    await runtime.vector_threads.run(sweep)


async def _erase_longterm(runtime: Runtime, token_id: int, user: str) -> str:
    record = await runtime.tokens.get(token_id)
    config = record.config if record is not None else None
    if config is None or not runtime.longterm.consumes(config):
        return "off"
    await runtime.longterm.delete_all(token_id, config, user)
    return "erased"


async def _after_running(runtime: Runtime, token_id: int, user: str, job_ids: list[int]) -> None:
    """Wait for the user's jobs that were running to end (their event is gone: a retry of one
    finds nothing to do), drop them, and sweep the vector layers again for a late write."""
    deadline = time.monotonic() + runtime.settings.memory_store_timeout
    while time.monotonic() < deadline:
        if not await runtime.db.run(lambda conn: erase_rows.running(conn, job_ids)):
            break
        await asyncio.sleep(_POLL)
    await runtime.db.write(lambda conn: erase_rows.drop_jobs(conn, job_ids))
    shards = await runtime.vector_threads.run(lambda: runtime.vectors.shards(token_id))
    await _sweep_vectors(runtime, shards, user)
    await _erase_longterm(runtime, token_id, user)
