"""The job queue on SQLite and PostgreSQL: claims, per-session order, leases that expire,
retries with backoff, and the end states, through the worker that runs real consumers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sqlalchemy import Connection, select, update

from memory_bridge.events import queue
from memory_bridge.events.model import StoredEvent
from memory_bridge.events.queue import Job
from memory_bridge.jobs.contract import WorkerSettings
from memory_bridge.jobs.worker import JobWorker
from memory_bridge.sources.base import JobStep, OutcomeUnknown, PermanentFailure
from memory_bridge.storage.db import Database, create_engine, create_schema, session_factory
from memory_bridge.storage.tables import jobs


async def _enqueue(db: Database, order_key: str, event_id: str, consumer: str = "c") -> None:
    def work(conn: Connection) -> None:
        queue.enqueue(conn, event_id, 1, order_key, [consumer])

    await db.write(work)


async def _claim(db: Database, owner: str, limit: int = 10, lease: float = 60) -> list[Job]:
    return await db.write(lambda conn: queue.claim(conn, owner, limit, lease, ["c"]))


async def _statuses(db: Database) -> dict[str, str]:
    def read(conn: Connection) -> dict[str, str]:
        return {r.event_id: r.status for r in conn.execute(select(jobs.c.event_id, jobs.c.status))}

    return await db.run(read)


async def test_one_session_runs_in_order_and_sessions_in_parallel(db: Database) -> None:
    for i in range(3):
        await _enqueue(db, "t|u|a", f"a{i}")
        await _enqueue(db, "t|u|b", f"b{i}")
    first = await _claim(db, "w1")
    assert [j.event_id for j in first] == ["a0", "b0"]  # one per session, oldest first
    assert await _claim(db, "w2") == []  # their successors wait
    await db.write(lambda conn: queue.finish(conn, first[0]))
    second = await _claim(db, "w2")
    assert [j.event_id for j in second] == ["a1"]
    assert second[0].attempts == 1 and second[0].lease_owner == "w2"


async def test_an_expired_lease_is_claimed_again_and_the_old_owner_cannot_end_it(
    db: Database,
) -> None:
    await _enqueue(db, "k", "e1")
    (job,) = await _claim(db, "dead", lease=0.05)
    await asyncio.sleep(0.1)
    (again,) = await _claim(db, "alive")
    assert again.id == job.id and again.attempts == 2
    assert not await db.write(lambda conn: queue.finish(conn, job))  # the dead owner's end
    assert await db.write(lambda conn: queue.finish(conn, again))
    assert (await _statuses(db))["e1"] == queue.DONE


async def test_a_retry_waits_for_its_backoff_and_blocks_its_session(db: Database) -> None:
    await _enqueue(db, "k", "e1")
    await _enqueue(db, "k", "e2")
    (job,) = await _claim(db, "w")
    assert await db.write(lambda conn: queue.retry_later(conn, job, 60, "boom"))
    assert await _claim(db, "w") == []  # e1 waits 60 s, and e2 must not overtake it

    def due_now(conn: Connection) -> None:
        conn.execute(update(jobs).where(jobs.c.event_id == "e1").values(next_attempt_at=0))

    await db.write(due_now)
    (retried,) = await _claim(db, "w")
    assert retried.event_id == "e1" and retried.attempts == 2


async def test_release_gives_back_a_stopping_workers_jobs(db: Database) -> None:
    await _enqueue(db, "k1", "e1")
    await _enqueue(db, "k2", "e2")
    assert len(await _claim(db, "stopping")) == 2
    assert await db.write(lambda conn: queue.release(conn, "stopping")) == 2
    assert len(await _claim(db, "next")) == 2


class _Recorder:
    """A consumer that records what it ran and fails as told."""

    name = "c"
    cancel_safe = True

    def __init__(self, outcomes: dict[str, list[BaseException | None]]) -> None:
        self.outcomes = outcomes
        self.ran: list[tuple[str, int]] = []

    async def run(self, job: Job, event: StoredEvent, progress: JobStep) -> None:
        self.ran.append((event.event_id, job.attempts))
        await progress.step(f"attempt-{job.attempts}")
        plan = self.outcomes.get(event.event_id, [])
        outcome = plan[job.attempts - 1] if job.attempts <= len(plan) else None
        if outcome is not None:
            raise outcome


async def _append_event(db: Database, event_id: str, order_key: str) -> None:
    from memory_bridge.events import log
    from memory_bridge.events.model import EventType, NewEvent

    event = NewEvent(
        EventType.SESSION_STARTED,
        order_key,
        {"user": "", "session": order_key},
        {},
        event_id=event_id,
    )

    def work(conn: Connection) -> None:
        log.append(conn, 1, [event])
        queue.enqueue(conn, event_id, 1, order_key, ["c"])

    await db.write(work)


async def _drain(worker: JobWorker, db: Database, count: int) -> dict[str, str]:
    worker.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        statuses = await _statuses(db)
        if len(statuses) == count and all(s not in queue.OPEN for s in statuses.values()):
            break
        await asyncio.sleep(0.02)
    await worker.stop(5)
    return await _statuses(db)


async def test_the_worker_retries_then_ends_each_job_in_its_state(db: Database) -> None:
    consumer = _Recorder(
        {
            "flaky": [RuntimeError("once"), None],
            "hopeless": [RuntimeError("1"), RuntimeError("2"), RuntimeError("3")],
            "refused": [PermanentFailure("no")],
            "ambiguous": [OutcomeUnknown("maybe")],
        }
    )
    for event_id in ("ok", "flaky", "hopeless", "refused", "ambiguous"):
        await _append_event(db, event_id, f"session-{event_id}")
    settings = WorkerSettings(concurrency=4, lease=30, poll=0.05, max_attempts=3, backoff=0.01)
    statuses = await _drain(JobWorker(db, {"c": consumer}, settings), db, 5)
    assert statuses == {
        "ok": queue.DONE,
        "flaky": queue.DONE,
        "hopeless": queue.FAILED,
        "refused": queue.FAILED,
        "ambiguous": queue.UNKNOWN,
    }
    runs: dict[str, list[int]] = {}
    for event_id, attempt in consumer.ran:
        runs.setdefault(event_id, []).append(attempt)
    assert runs == {
        "ok": [1],
        "flaky": [1, 2],
        "hopeless": [1, 2, 3],
        "refused": [1],
        "ambiguous": [1],
    }

    def details(conn: Connection) -> dict[str, Any]:
        rows = conn.execute(select(jobs.c.event_id, jobs.c.step, jobs.c.last_error))
        return {r.event_id: (r.step, r.last_error) for r in rows}

    found = await db.run(details)
    assert found["hopeless"] == ("attempt-3", "RuntimeError")
    assert found["ok"] == ("attempt-1", None)

    job_id = await db.run(
        lambda conn: conn.execute(
            select(jobs.c.id).where(jobs.c.event_id == "hopeless")
        ).scalar_one()
    )
    assert await db.write(lambda conn: queue.requeue(conn, 1, job_id))
    assert not await db.write(lambda conn: queue.requeue(conn, 2, job_id))  # another token's
    assert (await _statuses(db))["hopeless"] == queue.PENDING


async def test_the_worker_keeps_per_session_order_under_concurrency(db: Database) -> None:
    consumer = _Recorder({})
    for i in range(30):
        await _append_event(db, f"e{i:02d}-s{i % 3}", f"s{i % 3}")
    settings = WorkerSettings(concurrency=8, lease=30, poll=0.05)
    await _drain(JobWorker(db, {"c": consumer}, settings), db, 30)
    for session in range(3):
        ran = [e for e, _ in consumer.ran if e.endswith(f"-s{session}")]
        assert ran == sorted(ran) and len(ran) == 10


class _Stuck:
    """A consumer whose run never ends by itself (its work outlives a cancel, or not)."""

    def __init__(self, name: str, cancel_safe: bool) -> None:
        self.name = name
        self.cancel_safe = cancel_safe
        self.started = asyncio.Event()

    async def run(self, job: Job, event: StoredEvent, progress: JobStep) -> None:
        self.started.set()
        await asyncio.Event().wait()


async def test_stopping_releases_only_the_leases_whose_work_a_cancel_ends(db: Database) -> None:
    safe, unsafe = _Stuck("safe", True), _Stuck("unsafe", False)
    for name in ("safe", "unsafe"):
        from memory_bridge.events import log
        from memory_bridge.events.model import EventType, NewEvent

        event = NewEvent(EventType.SESSION_STARTED, f"k-{name}", {"user": "", "session": name}, {})

        def work(conn: Connection, event: NewEvent = event, name: str = name) -> None:
            log.append(conn, 1, [event])
            queue.enqueue(conn, event.event_id, 1, f"k-{name}", [name])

        await db.write(work)
    worker = JobWorker(db, {"safe": safe, "unsafe": unsafe}, WorkerSettings(poll=0.05))
    worker.start()
    await asyncio.wait_for(asyncio.gather(safe.started.wait(), unsafe.started.wait()), 30)
    await worker.stop(0.05)

    def leases(conn: Connection) -> dict[str, tuple[str, str | None]]:
        rows = conn.execute(select(jobs.c.consumer, jobs.c.status, jobs.c.lease_owner))
        return {r.consumer: (r.status, r.lease_owner) for r in rows}

    found = await db.run(leases)
    assert found["safe"] == (queue.PENDING, None)  # claimable at once by the next worker
    assert found["unsafe"] == (queue.RUNNING, worker.owner)  # left to expire


async def test_a_claim_does_not_walk_the_finished_jobs_of_its_session(tmp_path: Any) -> None:
    """A session's order key gathers every finished job of the session; whether an earlier
    job of it is still open must be a seek in the order index (which holds the status), so
    the work of a claim (SQLite VM steps, counted) stays flat as the session grows."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'q.sqlite'}")
    await create_schema(engine)
    db = session_factory(engine)

    async def claim_steps(key: str, finished: int) -> int:
        def fill(conn: Connection) -> None:
            for i in range(finished):
                queue.enqueue(conn, f"{key}-{i}", 1, key, ["c"])
            conn.execute(update(jobs).where(jobs.c.order_key == key).values(status=queue.DONE))
            queue.enqueue(conn, f"{key}-last", 1, key, ["c"])

        def claim(conn: Connection) -> tuple[list[Job], int]:
            driver = conn.connection.driver_connection
            assert driver is not None
            steps = [0]

            def tick() -> int:
                steps[0] += 1
                return 0  # go on

            driver.set_progress_handler(tick, 1)
            try:
                return queue.claim(conn, "w", 10, 60, ["c"]), steps[0]
            finally:
                driver.set_progress_handler(None, 1)

        await db.write(fill)
        found, steps = await db.write(claim)
        assert [j.event_id for j in found] == [f"{key}-last"]
        return steps

    try:
        short = await claim_steps("short", 10)
        long = await claim_steps("long", 2000)
        assert long < 2 * short, (short, long)
    finally:
        await db.close()
        await engine.dispose()


async def test_done_jobs_go_after_their_retention_and_the_others_stay(db: Database) -> None:
    consumer = _Recorder({"refused": [PermanentFailure("no")]})
    for event_id in ("old", "new", "refused"):
        await _append_event(db, event_id, f"s-{event_id}")
    first = JobWorker(db, {"c": consumer}, WorkerSettings(poll=0.05))  # a week's retention
    assert await _drain(first, db, 3) == {
        "old": queue.DONE,
        "new": queue.DONE,
        "refused": queue.FAILED,
    }
    two_hours_ago = time.time() - 7200
    await db.write(
        lambda conn: conn.execute(
            update(jobs)
            .where(jobs.c.event_id.in_(["old", "refused"]))
            .values(next_attempt_at=two_hours_ago - 1, updated_at=two_hours_ago)
        )
    )
    # A batch never takes more than its `limit`.
    assert await db.write(lambda conn: queue.purge_done(conn, time.time() - 3600, 0)) == 0

    settings = WorkerSettings(poll=0.05, retention=3600, purge_every=0.05)
    worker = JobWorker(db, {"c": consumer}, settings)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while "old" in await _statuses(db) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    finally:
        await worker.stop(5)
    # The failed job waits for an operator whatever its age; a recent done job stays.
    assert await _statuses(db) == {"new": queue.DONE, "refused": queue.FAILED}
