"""A worker draining the job queue: claims jobs, runs each with its consumer, records the end.

`serve` runs one in-process (the embedded case); `memory-bridge worker` runs one as its own
process, and any number of them share a PostgreSQL queue. A job is leased, never locked for
its whole run: the lease is short and a heartbeat renews it while the job runs (however long
it takes: a rebuild page, a slow Mem0 add), so a worker that dies leaves a lease that expires
within `lease` seconds and the job is claimed again. A worker starting on the same host gives
back at once the leases of a process there that is gone (`events.owners`): a restarted server
resumes a crashed one's work without waiting for them to expire.
A failure is retried with exponential backoff up to `max_attempts`, then the job is
`failed`, with its error (scrubbed of secrets) kept for the admin API.

A job of a consumer that can run a batch (`BatchConsumer`: the episodic index) is claimed with
up to `batch - 1` more due jobs of its token and consumer (`events.backlog`): a backlog is
indexed in batches, one embedding call and one upsert each, the batch taking one slot of
`concurrency`, and at most `batch_runs` (one by default) such runs at a time: the worker's
share of the CPU-bound pool that recall uses is that many threads, whatever the backlog.
Coalesced jobs (past the backlog's bound) are claimed only when no due pending job is left for
a slot. A batch that fails is run again job by job, each with its own retries: one bad turn
never fails the others.

After each job the worker tells `after_job` (the vector shard optimizer) which token it worked
for: maintenance that must never run in a request (an HNSW build) is started from here, in the
background, one at a time (`vectors.optimizer`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from sqlalchemy import Connection, select

from memory_bridge.core import metrics
from memory_bridge.core.request_context import request_id_var
from memory_bridge.events import backlog, owners, queue
from memory_bridge.events.log import stored_event
from memory_bridge.events.model import StoredEvent
from memory_bridge.events.queue import Job
from memory_bridge.jobs.contract import BatchConsumer, Consumer, WorkerSettings
from memory_bridge.sources.base import OutcomeUnknown, PermanentFailure
from memory_bridge.storage.db import Database, mark_background
from memory_bridge.storage.tables import memory_events

log = logging.getLogger(__name__)
# Done jobs deleted per write: a short hold of the writer, whatever the backlog.
PURGE_BATCH = 1000


class JobWorker:
    def __init__(
        self,
        db: Database,
        consumers: Mapping[str, Consumer],
        settings: WorkerSettings,
        scrub: Callable[[BaseException, int], Awaitable[str]] | None = None,
        after_job: Callable[[int], None] | None = None,
    ) -> None:
        self._db = db
        self._consumers = dict(consumers)
        self._settings = settings
        self._scrub = scrub
        self._after_job = after_job
        self.owner = owners.owner_id()
        self._wake = asyncio.Event()
        self._stopping = False
        self._running: dict[asyncio.Task[None], tuple[Job, ...]] = {}
        self._batchable = tuple(
            name
            for name, c in self._consumers.items()
            if isinstance(c, BatchConsumer) and settings.batch > 1
        )
        # Whether the last look for jobs may have left claimable ones behind for want of a
        # free slot: a job's end then looks again. Otherwise it looks again only when the
        # ended job's successor waits (its end said so), or on a wake-up or the poll.
        self._full = False
        self._loop_task: asyncio.Task[None] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._next_purge = 0.0  # time.monotonic() of the next look for expired done jobs
        self.completed = 0

    def wake(self) -> None:
        """New jobs were committed: look now rather than at the next poll."""
        self._wake.set()

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self.run(), name="memory-bridge-jobs")

    async def run(self) -> None:
        mark_background()  # its jobs' tasks, started below, inherit it
        self._heartbeat_task = asyncio.create_task(self._heartbeat(), name="memory-bridge-lease")
        await self._release_gone()
        while not self._stopping:
            # Cleared before looking: a wake-up that comes while the claim runs (a turn
            # enqueued meanwhile) is kept, and makes the next look immediate.
            self._wake.clear()
            free = self._settings.concurrency - len(self._running)
            claimed: list[list[tuple[Job, Loaded]]] = []
            if free > 0:
                try:
                    claimed = await self._db.write(self._claim(free, self._batch_room()))
                except Exception as exc:
                    log.error("claiming jobs failed: %s", type(exc).__name__)
            for group in claimed:
                if len(group) == 1:
                    task = asyncio.create_task(self._run(*group[0]))
                else:
                    task = asyncio.create_task(self._run_batch(group))
                self._running[task] = tuple(job for job, _ in group)
                task.add_done_callback(self._finished)
            self._full = free <= 0 or len(claimed) == free
            if claimed and len(claimed) == free:
                continue  # more may be waiting
            await self._purge_done()
            try:
                async with asyncio.timeout(self._settings.poll):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _release_gone(self) -> None:
        try:
            released = await self._db.write(lambda c: queue.release_gone(c, owners.is_gone))
        except Exception as exc:
            log.error("releasing a dead worker's jobs failed: %s", type(exc).__name__)
            return
        if released:
            log.info("took back %d job(s) leased by a process that is gone", released)

    async def _heartbeat(self) -> None:
        """Renew the leases of the jobs running here, every third of a lease: a job may run
        longer than its lease, and its lease still ends soon after this process does."""
        owner, lease = self.owner, self._settings.lease
        while True:
            await asyncio.sleep(lease / 3)
            ids = [job.id for jobs in self._running.values() for job in jobs]
            if not ids:
                continue

            def renew(conn: Connection, ids: list[int] = ids) -> int:
                return queue.renew(conn, owner, ids, lease)

            try:
                await self._db.write(renew)
            except Exception as exc:
                log.error("renewing job leases failed: %s", type(exc).__name__)

    async def _purge_done(self) -> None:
        """One bounded batch of done jobs past their retention, when one is due: the queue
        would otherwise keep a row per turn and consumer for ever. A full batch makes the next
        idle moment look again; a short one waits `purge_every`."""
        if time.monotonic() < self._next_purge:
            return
        cutoff = time.time() - self._settings.retention
        try:
            gone = await self._db.write(lambda conn: queue.purge_done(conn, cutoff, PURGE_BATCH))
        except Exception as exc:
            gone = 0
            log.error("removing done jobs failed: %s", type(exc).__name__)
        if gone < PURGE_BATCH:
            self._next_purge = time.monotonic() + self._settings.purge_every

    def _finished(self, task: asyncio.Task[None]) -> None:
        jobs = self._running.pop(task, ())
        if self._full or (jobs and jobs[0].consumer in self._batchable):
            # A slot is free for a job the last look had no room for; or the batch run that
            # kept its consumer's backlog waiting ended.
            self._wake.set()

    def _batch_room(self) -> int:
        """Runs of batch consumers that may start now (`WorkerSettings.batch_runs`)."""
        running = sum(1 for jobs in self._running.values() if jobs[0].consumer in self._batchable)
        return self._settings.batch_runs - running

    def _claim(
        self, limit: int, batch_limit: int
    ) -> Callable[[Connection], list[list[tuple[Job, Loaded]]]]:
        """Up to `limit` runs: a job alone, or (at most `batch_limit` of them) a batch of one
        token's jobs of a batch consumer."""
        owner, lease, batchable = self.owner, self._settings.lease, self._batchable
        plain = tuple(name for name in self._consumers if name not in batchable)
        size = self._settings.batch

        def work(conn: Connection) -> list[list[tuple[Job, Loaded]]]:
            runs = backlog.claim_runs(
                conn, owner, lease, (limit, batch_limit), (plain, batchable), size
            )
            # Each job's event is read in the same unit: one database round trip less per job
            # (every turn of a memory token has jobs run in the serving process).
            return [[(job, _loaded(conn, job.event_id)) for job in run] for run in runs]

        return work

    async def _run_batch(self, runs: list[tuple[Job, Loaded]]) -> None:
        """Jobs of one token and batch consumer run as one call; on a failure, one by one."""
        ready = [(job, event) for job, event in runs if isinstance(event, StoredEvent)]
        for job, loaded in runs:
            if not isinstance(loaded, StoredEvent):
                await self._run(job, loaded)  # gone (done) or unreadable (its own failure)
        if not ready:
            return
        first = ready[0][0]
        consumer = self._consumers[first.consumer]
        assert isinstance(consumer, BatchConsumer)
        lease = self._settings.lease
        try:
            timeout = getattr(consumer, "job_timeout", self._settings.job_timeout)
            async with asyncio.timeout(timeout):
                await consumer.run_batch(
                    [(job, event, _JobProgress(self._db, job, lease)) for job, event in ready]
                )
        except asyncio.CancelledError:
            raise  # stopping: the leases are released by `stop`
        except Exception as exc:
            log.warning(
                "a batch of %d %s jobs failed (%s): each runs alone",
                len(ready),
                first.consumer,
                type(exc).__name__,
            )
            for job, event in ready:
                await self._run(job, event)
            return
        await self._end_batch([job for job, _ in ready])
        if self._after_job is not None:
            try:
                self._after_job(first.token_id)
            except Exception as exc:
                log.error("after-job maintenance failed: %s", type(exc).__name__)

    async def _end_batch(self, jobs: list[Job]) -> None:
        """A batch's jobs done, in one write; then a look for what their end unblocked."""

        def work(conn: Connection) -> int:
            return sum(queue.finish(conn, job) for job in jobs)

        for job in jobs:
            metrics.job_outcome(job.consumer, queue.DONE)
        try:
            ended = await self._db.write(work)
        except Exception as exc:
            log.error("recording a batch's end failed: %s", type(exc).__name__)
            return
        self.completed += ended
        if ended < len(jobs):
            log.warning("%d job lease(s) lost before the batch ended", len(jobs) - ended)
        self._wake.set()  # a later job of one of their sessions may be claimable now

    async def _run(self, job: Job, loaded: Loaded) -> None:
        consumer = self._consumers[job.consumer]
        try:
            if isinstance(loaded, Exception):
                raise loaded  # an event that cannot be read fails its job, not the claim
            event = loaded
            if event is None:  # its token was purged meanwhile
                await self._end(job, queue.DONE, None)
                return
            # The job's log lines carry the request id of the turn it works for.
            request_id_var.set(str(event.meta.get("request_id") or "-"))
            timeout = getattr(consumer, "job_timeout", self._settings.job_timeout)
            async with asyncio.timeout(timeout):
                await consumer.run(job, event, _JobProgress(self._db, job, self._settings.lease))
        except OutcomeUnknown as exc:
            await self._end(job, queue.UNKNOWN, await self._describe(exc, job))
        except PermanentFailure as exc:
            await self._end(job, queue.FAILED, await self._describe(exc, job))
        except asyncio.CancelledError:
            raise  # stopping: the lease is released by `stop`
        except Exception as exc:
            error = await self._describe(exc, job)
            attempts = f"attempt {job.attempts} of {self._settings.max_attempts}"
            if job.attempts >= self._settings.max_attempts:
                log.error(
                    "%s.remember failed (%s, job %d failed): %s",
                    job.consumer,
                    attempts,
                    job.id,
                    error,
                )
                await self._end(job, queue.FAILED, error)
            else:
                delay = min(
                    self._settings.backoff * 2 ** (job.attempts - 1), self._settings.max_backoff
                )
                log.error(
                    "%s.remember failed (%s, retried in %.0fs): %s",
                    job.consumer,
                    attempts,
                    delay,
                    error,
                )
                metrics.job_outcome(job.consumer, "retried")
                await self._write(lambda conn: queue.retry_later(conn, job, delay, error))
        else:
            await self._end(job, queue.DONE, None)
            self.completed += 1
        if self._after_job is not None:
            try:
                self._after_job(job.token_id)  # only signals: the work runs elsewhere
            except Exception as exc:
                log.error("after-job maintenance failed: %s", type(exc).__name__)

    async def _describe(self, exc: BaseException, job: Job) -> str:
        if self._scrub is not None:
            return await self._scrub(exc, job.token_id)
        return type(exc).__name__

    async def _end(self, job: Job, status: str, error: str | None) -> None:
        metrics.job_outcome(job.consumer, status)

        def work(conn: Connection) -> tuple[bool, bool]:
            ended = queue.finish(conn, job, status, error)
            return ended, ended and queue.successor_waiting(conn, job)

        try:
            ended, successor = await self._db.write(work)
        except Exception as exc:
            log.error("recording a job's end failed: %s", type(exc).__name__)
            return
        if not ended:
            log.warning("a job's lease was lost before it ended; its new owner decides")
        elif successor:
            self._wake.set()  # the next job of its order key is claimable now

    async def _write(self, work: Callable[[Connection], bool]) -> None:
        try:
            if not await self._db.write(work):
                log.warning("a job's lease was lost before it ended; its new owner decides")
        except Exception as exc:
            log.error("recording a job's end failed: %s", type(exc).__name__)

    async def stop(self, timeout: float) -> None:
        """Stop claiming, let in-flight jobs finish for up to `timeout`, release the rest."""
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            await asyncio.gather(self._loop_task, return_exceptions=True)
        kept: list[int] = []
        if self._running:
            _, pending = await asyncio.wait(set(self._running), timeout=timeout)
            for task in pending:
                for job in self._running.get(task, ()):
                    if not self._consumers[job.consumer].cancel_safe:
                        kept.append(job.id)
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()  # the kept leases expire within one lease
            await asyncio.gather(self._heartbeat_task, return_exceptions=True)
        owner = self.owner
        released = await self._db.write(lambda conn: queue.release(conn, owner, kept))
        if released:
            log.info("released %d job lease(s) at shutdown", released)
        if kept:
            log.info("%d job lease(s) left to expire: their work may still be writing", len(kept))


class _JobProgress:
    def __init__(self, db: Database, job: Job, lease: float) -> None:
        self._db = db
        self._job = job
        self._lease = lease

    async def step(self, name: str) -> None:
        job, lease = self._job, self._lease
        if not await self._db.write(lambda conn: queue.set_step(conn, job, name, lease)):
            raise asyncio.CancelledError  # our lease is gone: another worker owns the job now


# A claimed job's event: the event, None (gone with its purged token) or why it is unreadable.
Loaded = StoredEvent | None | Exception


def _loaded(conn: Connection, event_id: str) -> Loaded:
    try:
        row = conn.execute(
            select(memory_events).where(memory_events.c.event_id == event_id)
        ).first()
        return None if row is None else stored_event(row)
    except Exception as exc:
        return exc
