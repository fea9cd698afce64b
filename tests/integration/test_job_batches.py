"""Batches and the backlog's order in the job queue (SQLite and PostgreSQL), through the real
worker: a batch consumer's due jobs of one token run as one batch; a batch that fails runs again
job by job, each to its own end; coalesced jobs wait for every due pending job."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from sqlalchemy import Connection, select

from memory_bridge.events import log, queue
from memory_bridge.events.backlog import Bounds, enqueue_bounded
from memory_bridge.events.model import EventType, NewEvent, StoredEvent
from memory_bridge.events.queue import Job
from memory_bridge.jobs.contract import WorkerSettings
from memory_bridge.jobs.worker import JobWorker
from memory_bridge.sources.base import JobStep, PermanentFailure
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import jobs


class _Batcher:
    """A batch consumer that records its calls; an event named `bad*` fails."""

    name = "c"
    cancel_safe = True

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.singles: list[str] = []

    async def run(self, job: Job, event: StoredEvent, progress: JobStep) -> None:
        self.singles.append(event.event_id)
        if event.event_id.startswith("bad"):
            raise PermanentFailure("bad turn")

    async def run_batch(self, runs: Sequence[tuple[Job, StoredEvent, JobStep]]) -> None:
        self.batches.append([event.event_id for _, event, _ in runs])
        if any(event.event_id.startswith("bad") for _, event, _ in runs):
            raise RuntimeError("one turn of the batch is bad")


async def _append(db: Database, token_id: int, event_id: str, bounds: Bounds | None) -> None:
    session = f"s-{event_id}"
    event = NewEvent(
        EventType.SESSION_STARTED, session, {"user": "", "session": session}, {}, event_id=event_id
    )

    def work(conn: Connection) -> None:
        log.append(conn, token_id, [event])
        enqueue_bounded(conn, event_id, token_id, session, ["c"], None, bounds)

    await db.write(work)


async def _statuses(db: Database) -> dict[str, str]:
    def read(conn: Connection) -> dict[str, str]:
        return {r.event_id: r.status for r in conn.execute(select(jobs.c.event_id, jobs.c.status))}

    return await db.run(read)


async def _drain(worker: JobWorker, db: Database) -> dict[str, str]:
    worker.start()
    deadline = time.monotonic() + 60  # only keeps a broken build from hanging the suite
    while time.monotonic() < deadline:
        statuses = await _statuses(db)
        if all(s not in queue.OPEN for s in statuses.values()):
            break
        await asyncio.sleep(0.02)
    await worker.stop(5)
    return await _statuses(db)


async def test_a_tokens_due_jobs_run_as_one_batch_and_a_failed_batch_job_by_job(
    db: Database,
) -> None:
    names = ["e1", "e2", "bad3", "e4", "e5", "e6"]
    for name in names:
        await _append(db, 1, name, None)
    consumer = _Batcher()
    settings = WorkerSettings(concurrency=2, poll=0.05, max_attempts=1, batch=8)
    statuses = await _drain(JobWorker(db, {"c": consumer}, settings), db)
    # One call for the six (two claimed as the batch's first jobs, four as companions) ...
    assert consumer.batches == [names]
    # ... which failed: each ran alone, and only the bad one failed.
    assert sorted(consumer.singles) == sorted(names)
    assert statuses == {name: queue.FAILED if name == "bad3" else queue.DONE for name in names}


async def test_a_good_batch_ends_every_job_done_in_one_call(db: Database) -> None:
    names = [f"e{i}" for i in range(5)]
    for name in names:
        await _append(db, 1, name, None)
    consumer = _Batcher()
    settings = WorkerSettings(concurrency=4, poll=0.05, batch=3)
    statuses = await _drain(JobWorker(db, {"c": consumer}, settings), db)
    assert [len(b) for b in consumer.batches] == [3, 2] and consumer.singles == []
    assert statuses == dict.fromkeys(names, queue.DONE)


async def test_coalesced_jobs_wait_for_every_due_pending_job(db: Database) -> None:
    bounds = Bounds(per_token=2, overall=100, coalescible=frozenset({"c"}))
    for name in ("a1", "a2", "a3", "a4"):  # token 1's flood: two pending, then coalesced
        await _append(db, 1, name, bounds)
    await _append(db, 2, "b1", bounds)  # another token, under its own bound
    assert await _statuses(db) == {
        "a1": queue.PENDING,
        "a2": queue.PENDING,
        "a3": queue.COALESCED,
        "a4": queue.COALESCED,
        "b1": queue.PENDING,
    }
    consumer = _Batcher()
    settings = WorkerSettings(concurrency=1, poll=0.05, batch=1)  # job by job: the order shows
    statuses = await _drain(JobWorker(db, {"c": consumer}, settings), db)
    assert consumer.singles == ["a1", "a2", "b1", "a3", "a4"]
    assert set(statuses.values()) == {queue.DONE}


class _Overlaps(_Batcher):
    """Records how many of its runs overlap at most."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.most = 0

    async def run_batch(self, runs: Sequence[tuple[Job, StoredEvent, JobStep]]) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        await asyncio.sleep(0.05)  # long enough for another run to start beside it, if allowed
        self.now -= 1
        await super().run_batch(runs)


async def test_one_batch_run_at_a_time_whatever_the_tokens(db: Database) -> None:
    """The worker's share of the CPU-bound pool: several tokens' backlogs, batches one by one."""
    for token_id in (1, 2, 3):
        for i in range(3):
            await _append(db, token_id, f"t{token_id}-{i}", None)
    consumer = _Overlaps()
    settings = WorkerSettings(concurrency=8, poll=0.05, batch=8)
    statuses = await _drain(JobWorker(db, {"c": consumer}, settings), db)
    assert consumer.most == 1
    assert sorted(len(b) for b in consumer.batches) == [3, 3, 3]  # one per token
    assert set(statuses.values()) == {queue.DONE}
