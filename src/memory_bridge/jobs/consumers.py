"""Job consumers: the memory sources whose work happens after the turn, fed from the log.

A job carries only its event id; the turn is rebuilt from the event's payload and the token's
current configuration (a token deleted meanwhile means nothing is left to do).
"""

from __future__ import annotations

from collections.abc import Sequence

from memory_bridge.events.model import EventType, StoredEvent
from memory_bridge.events.queue import Job
from memory_bridge.sources.base import JobStep, MemorySource
from memory_bridge.sources.episodic import EpisodicMemory
from memory_bridge.sources.longterm.consolidator import CONSUMER, Consolidator
from memory_bridge.sources.replay import rebuild_exchange
from memory_bridge.sources.summaries import CONSUMER as SUMMARY
from memory_bridge.sources.summaries import SessionSummaries
from memory_bridge.storage.tokens import TokenStore


class SourceConsumer:
    """Runs `source.remember` for the turn an event records."""

    def __init__(self, source: MemorySource, tokens: TokenStore, cancel_safe: bool) -> None:
        self.name = source.name
        self.cancel_safe = cancel_safe
        self._source = source
        self._tokens = tokens

    async def run(self, job: Job, event: StoredEvent, progress: JobStep) -> None:
        config = await self._tokens.current_config(event.token_id)
        if config is None:
            return  # the token is gone or unusable: nothing to remember for it
        await self._source.remember(rebuild_exchange(event, config, job, progress))


class EpisodicConsumer(SourceConsumer):
    """The episodic index's consumer, which also indexes a batch of one token's turns at once
    (the queue's backlog, `events.backlog`): one embedding call and one upsert for all."""

    def __init__(self, source: EpisodicMemory, tokens: TokenStore) -> None:
        # The vector engine runs in threads that a cancel does not stop.
        super().__init__(source, tokens, cancel_safe=False)
        self._episodic = source

    async def run_batch(self, runs: Sequence[tuple[Job, StoredEvent, JobStep]]) -> None:
        """Every run is of one token (the worker batches by token and consumer)."""
        config = await self._tokens.current_config(runs[0][1].token_id)
        if config is None:
            return  # the token is gone or unusable: nothing to remember for it
        exchanges = [rebuild_exchange(event, config, job, step) for job, event, step in runs]
        await self._episodic.remember_batch(exchanges)


class ConsolidationConsumer:
    """Consolidates the long-term facts a turn's extraction stored (`consolidator`)."""

    name = CONSUMER
    cancel_safe = False  # Mem0 and the vector engine run in threads a cancel does not stop

    def __init__(self, consolidator: Consolidator, tokens: TokenStore) -> None:
        self._consolidator = consolidator
        self._tokens = tokens

    async def run(self, job: Job, event: StoredEvent, progress: JobStep) -> None:
        config = await self._tokens.current_config(event.token_id)
        user = event.payload.get("user")
        if config is None or not isinstance(user, str):
            return
        await self._consolidator.consolidate(event.token_id, config, user, event.event_id)


class SummaryConsumer:
    """Summarises a session once it is idle or long enough (`sources.summaries`)."""

    name = SUMMARY
    cancel_safe = False  # the memory LLM and the vector engine run in threads

    def __init__(self, summaries: SessionSummaries, tokens: TokenStore) -> None:
        self._summaries = summaries
        self._tokens = tokens

    async def run(self, job: Job, event: StoredEvent, progress: JobStep) -> None:
        config = await self._tokens.current_config(event.token_id)
        if config is None:
            return
        if event.type == EventType.SESSION_SUMMARISED:  # an imported summary
            await self._summaries.index(config, event)
            return
        await self._summaries.remember(rebuild_exchange(event, config, job, progress))
