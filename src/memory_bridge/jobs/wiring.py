"""What runs after a turn: the job worker built over the memory services, one consumer per
source whose memory work happens after the response, plus the rebuild."""

from __future__ import annotations

from memory_bridge.jobs.consumers import (
    ConsolidationConsumer,
    EpisodicConsumer,
    SourceConsumer,
    SummaryConsumer,
)
from memory_bridge.jobs.contract import Consumer, WorkerSettings
from memory_bridge.jobs.worker import JobWorker
from memory_bridge.lifecycle.rebuild import REBUILD, Rebuilder
from memory_bridge.sources.episodic import EpisodicMemory
from memory_bridge.sources.gateway import MemoryGateway
from memory_bridge.sources.longterm.consolidator import Consolidator
from memory_bridge.sources.longterm.source import LongTermMemory
from memory_bridge.sources.services import MemoryServices
from memory_bridge.sources.summaries import CONSUMER as SUMMARY
from memory_bridge.sources.summaries import SessionSummaries
from memory_bridge.tenancy.config import config_secrets
from memory_bridge.tenancy.secrets import scrub

# The sources whose `remember` runs from the queue; the others store nothing after a turn.
_AFTER_TURN = (MemoryGateway.name, LongTermMemory.name, EpisodicMemory.name)


def create_worker(memory: MemoryServices) -> JobWorker:
    settings = memory.settings
    consumers: dict[str, Consumer] = {
        # The Gateway's calls are async HTTP, ended by a cancel; Mem0 and the vector
        # engine run in threads that a cancel does not stop.
        s.name: SourceConsumer(s, memory.tokens, cancel_safe=s.name == MemoryGateway.name)
        for s in memory.sources
        if s.name in _AFTER_TURN
    }
    if memory.episodic is not None and EpisodicMemory.name in consumers:
        # Its work merges: a backlog of one token's turns is indexed in batches.
        consumers[EpisodicMemory.name] = EpisodicConsumer(memory.episodic, memory.tokens)
    consolidation = ConsolidationConsumer(Consolidator(memory.longterm), memory.tokens)
    consumers[consolidation.name] = consolidation
    if memory.episodic is not None:
        summaries = SessionSummaries(memory.db, memory.longterm, memory.episodic)
        consumers[SUMMARY] = SummaryConsumer(summaries, memory.tokens)
    if memory.episodic is not None:
        consumers[REBUILD] = Rebuilder(memory)
    worker_settings = WorkerSettings(
        concurrency=settings.job_concurrency,
        lease=settings.job_lease_seconds,
        job_timeout=settings.memory_store_timeout,
        poll=settings.job_poll_seconds,
        max_attempts=settings.job_max_attempts,
        backoff=settings.job_backoff_seconds,
        retention=settings.job_retention_seconds,
        batch=settings.job_batch_size,
        batch_runs=settings.job_batch_runs,
    )
    # Shard optimisation is started by the worker, off every request's path.
    after_job = memory.optimizer.poke if memory.optimizer is not None else None

    async def scrubbed(exc: BaseException, token_id: int) -> str:
        """An error's text fit to store: every secret of the token's config replaced."""
        record = await memory.tokens.get(token_id)
        secrets = config_secrets(record.config) if record and record.config else ()
        return f"{type(exc).__name__}: {scrub(exc, secrets)}"[:300]

    return JobWorker(memory.db, consumers, worker_settings, scrubbed, after_job)
