"""Erasing one end user of a token from every memory layer, in one call.

The order matters.
1. The database, in one transaction (`erase_rows`): the user's events go with their pending
   jobs, so no worker starts on one of their turns afterwards.
2. Long-term memory: Mem0's delete of the user's namespace (it logs `longterm.deleted`,
   content-free, for each fact it removes).
3. The vector engine: the user's points in every shard the token has (every embedding model
   it used, episodic and long-term alike), each shard that held any compacted after, so the
   deleted payloads leave the files too.
4. The database again: what appeared since step 1 (step 2's events, a late job's), then the
   content-free `user.erased` tombstone with the counts of the whole erasure.
5. The files: SQLite's WAL is checkpointed and truncated; on PostgreSQL the tables that held
   the user's rows are rewritten (`VACUUM FULL`: a plain VACUUM leaves the text in the table
   files); staged imports a killed import left behind are deleted.
The answer is a receipt (layers, counts, shards compacted, time), recorded in the audit log.
A rebuild running meanwhile replays the tombstone after whatever it indexed of the user, and
compacts its new shard then (`lifecycle.rebuild`).
A failure in 2 or 3 answers 5xx and the same call finishes the job: every step deletes by user,
not from a list it would have lost. A job of the user that was already running at step 1 may
still write; the erasure waits for it (at most `MEMORY_STORE_TIMEOUT`) before step 3.

A second call finds nothing and answers zero counts; it appends no tombstone (nothing was
erased) but is audited again, as every admin action is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection

from memory_bridge.core.turn import Scope
from memory_bridge.events import log as event_log
from memory_bridge.lifecycle import erase_rows
from memory_bridge.lifecycle.import_staging import sweep_stale
from memory_bridge.sources.services import MemoryServices
from memory_bridge.storage.traces import TraceStore
from memory_bridge.vectors.index import ShardKey, Where

log = logging.getLogger(__name__)

_POLL = 0.2
EPISODIC_KIND = "episodic"


@dataclass(frozen=True, slots=True)
class Erasure:
    """The receipt of one erasure: what it removed per layer (all zero: nothing of the user
    was left), what each layer did, the shards it compacted, when and how long."""

    counts: dict[str, int]
    longterm: str  # "erased", or "off" when the token has no long-term memory
    layers: dict[str, str]
    compacted: tuple[dict[str, Any], ...]  # {"model": …, "dims": …} per shard rewritten
    erased_at: str  # ISO 8601, UTC: when it finished
    seconds: float

    def as_json(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "longterm": self.longterm,
            "layers": self.layers,
            "generations_compacted": list(self.compacted),
            "erased_at": self.erased_at,
            "seconds": self.seconds,
        }


async def erase_user(
    runtime: MemoryServices,
    token_id: int,
    user: str,
    *,
    traces: TraceStore | None = None,
    request_id: str = "",
) -> Erasure:
    """Erase `user` of `token_id` (the caller checked the token exists)."""
    started = time.monotonic()
    if traces is not None:
        await traces.settle()  # a trace still queued would be written after the delete
    if runtime.access is not None:
        await runtime.access.forget_user(token_id, user)  # likewise a use not yet written
    shards = await runtime.vector_threads.run(lambda: runtime.vectors.shards(token_id))
    points, held = await _count_points(runtime, shards, user)

    def first(conn: Connection) -> erase_rows.RowsErased:
        return erase_rows.erase_rows(conn, token_id, user)

    found = await runtime.db.write(first)
    runtime.curated.forget(token_id)
    if found.running_jobs:
        await wait_for_jobs(runtime, found.running_jobs)
    longterm = await _erase_longterm(runtime, token_id, user)
    compacted = await _sweep_vectors(runtime, token_id, user, held)
    imports = await asyncio.to_thread(
        sweep_stale, runtime.settings.memory_bridge_data_dir / "imports"
    )
    earlier = {**erase_rows.counts_of(found), **points, "imports": imports}
    meta = {"source": "admin", "request_id": request_id}

    def last(conn: Connection) -> tuple[erase_rows.RowsErased, dict[str, int]]:
        return erase_rows.erase_rows_and_close(conn, token_id, user, earlier, meta)

    _, counts = await event_log.write_appending(runtime.db, last)
    storage = await erase_rows.rewrite_files(runtime.db, runtime.engine)
    erasure = Erasure(
        counts=counts,
        longterm=longterm,
        layers={
            "database": "erased",
            "longterm": longterm,
            "vectors": f"erased; {len(compacted)} shard(s) compacted",
            "imports": f"{imports} stale staged import(s) deleted",
            "storage": storage,
        },
        compacted=tuple({"model": k.model_id, "dims": k.dims} for k in compacted),
        erased_at=datetime.now(UTC).isoformat(timespec="seconds"),
        seconds=round(time.monotonic() - started, 3),
    )
    await runtime.audit.record(
        Scope(token_id=token_id, user=user, session=""),
        erase_rows.AUDIT_TYPE,
        request_id,
        erasure.as_json(),
    )
    log.info("token %d: an end user erased (%d events)", token_id, counts.get("events", 0))
    return erasure


async def _count_points(
    runtime: MemoryServices, shards: list[ShardKey], user: str
) -> tuple[dict[str, int], set[ShardKey]]:
    """The user's points: episodic, and the long-term layer's (its facts' vectors); and the
    shards that hold any."""

    def count() -> tuple[dict[str, int], set[ShardKey]]:
        total = episodic = 0
        holding = set()
        for key in shards:
            index = runtime.vectors.index(key.token_id, key.model_id, key.dims)
            found = index.count(Where(user=user))
            if found:
                holding.add(key)
                total += found
                episodic += index.count(Where(user=user, kind=EPISODIC_KIND))
        return {"episodic": episodic, "longterm": total - episodic}, holding

    return await runtime.vector_threads.run(count)


async def _sweep_vectors(
    runtime: MemoryServices, token_id: int, user: str, held: set[ShardKey]
) -> list[ShardKey]:
    """Delete the user's points of every shard, then rewrite each shard that held any (also
    those whose points the long-term layer deleted itself), so the deleted payloads are gone
    from the files as well (the cost: a copy of the shard's other points; docs/operations.md).
    Shards are listed afresh: a rebuild may have made one meanwhile."""

    def sweep() -> list[ShardKey]:
        compacted = []
        for key in runtime.vectors.shards(token_id):
            index = runtime.vectors.index(key.token_id, key.model_id, key.dims)
            if index.count(Where(user=user)):
                index.delete_where(Where(user=user))
                index.compact()
                compacted.append(key)
            elif key in held:
                index.compact()
                compacted.append(key)
        return compacted

    return await runtime.vector_threads.run(sweep)


async def _erase_longterm(runtime: MemoryServices, token_id: int, user: str) -> str:
    record = await runtime.tokens.get(token_id)
    config = record.config if record is not None else None
    if config is None or not runtime.longterm.consumes(config):
        return "off"
    await runtime.longterm.delete_all(token_id, config, user)
    return "erased"


async def wait_for_jobs(runtime: MemoryServices, job_ids: list[int]) -> None:
    """Wait for the user's jobs that were running to end (their event is gone: one that
    retries finds nothing to do), then drop them; the sweeps that follow catch their writes."""
    deadline = time.monotonic() + runtime.settings.memory_store_timeout
    while time.monotonic() < deadline:
        if not await runtime.db.run(lambda conn: erase_rows.running(conn, job_ids)):
            break
        await asyncio.sleep(_POLL)
    await runtime.db.write(lambda conn: erase_rows.drop_jobs(conn, job_ids))
