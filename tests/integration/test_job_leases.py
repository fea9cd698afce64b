"""Leases that follow their worker, on SQLite and PostgreSQL: a heartbeat keeps a job that
runs longer than its lease from being claimed again, and a worker starting on this host gives
back at once the jobs leased by a process that is gone (but not those of a live one, nor of
another host, which only their leases' expiry frees)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from sqlalchemy import Connection, select

from memory_bridge.events import log, owners, queue
from memory_bridge.events.model import EventType, NewEvent, StoredEvent
from memory_bridge.events.queue import Job
from memory_bridge.jobs.contract import WorkerSettings
from memory_bridge.jobs.worker import JobWorker
from memory_bridge.sources.base import JobStep
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import jobs


class _Slow:
    """A consumer whose run takes `seconds` and never reports a step (nothing else renews
    its lease), counting its runs whichever worker runs it."""

    name = "c"
    cancel_safe = True

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.runs: list[str] = []

    async def run(self, job: Job, event: StoredEvent, progress: JobStep) -> None:
        self.runs.append(job.lease_owner)
        await asyncio.sleep(self.seconds)


async def _append(db: Database, name: str) -> None:
    event = NewEvent(EventType.SESSION_STARTED, name, {"user": "", "session": name}, {})

    def work(conn: Connection) -> None:
        log.append(conn, 1, [event])
        queue.enqueue(conn, event.event_id, 1, name, ["c"])

    await db.write(work)


async def _jobs(db: Database) -> dict[str, tuple[str, str | None]]:
    def read(conn: Connection) -> dict[str, tuple[str, str | None]]:
        rows = conn.execute(select(jobs.c.order_key, jobs.c.status, jobs.c.lease_owner))
        return {r.order_key: (r.status, r.lease_owner) for r in rows}

    return await db.run(read)


async def _until(db: Database, key: str, status: str) -> None:
    deadline = time.monotonic() + 60  # only keeps a broken build from hanging the suite
    while (await _jobs(db))[key][0] != status:
        assert time.monotonic() < deadline, f"{key} never {status}: {await _jobs(db)}"
        await asyncio.sleep(0.02)


async def test_a_job_slower_than_its_lease_is_not_claimed_again_while_it_runs(
    db: Database,
) -> None:
    lease = 1.0
    consumer = _Slow(seconds=4 * lease)
    await _append(db, "slow")
    settings = WorkerSettings(concurrency=2, lease=lease, poll=0.05)
    first = JobWorker(db, {"c": consumer}, settings)
    first.start()
    await _until(db, "slow", queue.RUNNING)
    # A second worker looks all along: an expired lease would be its to take.
    second = JobWorker(db, {"c": consumer}, settings)
    second.start()
    try:
        await _until(db, "slow", queue.DONE)
    finally:
        await second.stop(5)
        await first.stop(5)
    assert consumer.runs == [first.owner]


def _dead_owner() -> str:
    """The owner id a process on this host had, once it has exited."""
    code = "from memory_bridge.events.owners import owner_id; print(owner_id())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


async def test_a_starting_worker_takes_back_the_jobs_of_a_dead_process_at_once(
    db: Database,
) -> None:
    held = {
        "dead": _dead_owner(),
        "alive": owners.owner_id(),  # this very process: another worker of it, still running
        "remote": "elsewhere:0badcafe:1:1:abcdef",  # another host: only its lease frees it
    }
    for key, owner in held.items():
        await _append(db, key)
        claimed = await db.write(lambda conn, owner=owner: queue.claim(conn, owner, 1, 600, ["c"]))
        assert len(claimed) == 1
    consumer = _Slow(seconds=0)
    worker = JobWorker(db, {"c": consumer}, WorkerSettings(poll=0.05))
    worker.start()
    try:
        await _until(db, "dead", queue.DONE)
    finally:
        await worker.stop(5)
    found = await _jobs(db)
    assert found["alive"] == (queue.RUNNING, held["alive"])
    assert found["remote"] == (queue.RUNNING, held["remote"])
    assert consumer.runs == [worker.owner]
