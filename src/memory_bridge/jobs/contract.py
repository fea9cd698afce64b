"""What the job worker runs and how: the consumer protocol (a memory source's work after the
turn, or a lifecycle job), the batch variant, and the worker's settings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from memory_bridge.events.model import StoredEvent
from memory_bridge.events.queue import Job
from memory_bridge.sources.base import JobStep


class Consumer(Protocol):
    name: str
    # False when cancelling a run may leave its work going on in a thread (a Mem0 add): the
    # lease of such a job is then left to expire rather than released, so no other worker
    # repeats the job beside the write still under way.
    cancel_safe: bool
    # A consumer may set `job_timeout` (seconds, or None: no limit) to replace the worker's;
    # one that runs longer than the lease must call `progress.step` regularly (it renews it).

    async def run(self, job: Job, event: StoredEvent, progress: JobStep) -> None: ...


@runtime_checkable
class BatchConsumer(Consumer, Protocol):
    """A consumer that can also run several jobs of one token at once."""

    async def run_batch(self, runs: Sequence[tuple[Job, StoredEvent, JobStep]]) -> None: ...


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    concurrency: int = 8
    lease: float = 30.0  # renewed every third of it while the job runs
    job_timeout: float = 120.0
    poll: float = 1.0
    max_attempts: int = 5
    backoff: float = 2.0  # seconds before the first retry; doubles each time
    max_backoff: float = 300.0
    retention: float = 7 * 86400.0  # how long a done job is kept (seconds since it ended)
    purge_every: float = 600.0  # seconds between two looks for done jobs past their retention
    batch: int = 32  # jobs of one token a batch consumer runs at once (1: job by job)
    # Runs of batch consumers at once (JOB_BATCH_RUNS): their work is CPU (embeddings, upserts)
    # in the pool that recall shares, so this bounds the worker's share; a backlog batches up
    # behind them.
    batch_runs: int = 1
