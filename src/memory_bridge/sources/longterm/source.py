"""Long-term memory: Mem0's facts, per token (and end user), in the process's vector engine.

Recall searches the token's memories with the latest user text of the request (not the last
message, which may be a tool result); a failure or a timeout fails the request with 502
`memory_retrieval_failed` naming the cause's category, e.g. `embedder_unreachable`
(`sources.failures`; the failure policy lives in `context.recall`). After a normal
completion the turn — the request's new user text(s) and the final assistant text; never
system prompts, injected memories, reasoning or tool payloads — is handed to Mem0 as
background work, where one LLM call extracts the facts worth keeping; every fact it changes is
appended to the event log (`events`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial

from memory_bridge.core.candidates import Candidate
from memory_bridge.core.turn import Turn
from memory_bridge.sources.base import Exchange, OnRecallFailure, Recall
from memory_bridge.sources.failures import RecallFailed, classify
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.events import FactLog, enqueue_after
from memory_bridge.sources.longterm.points import EVENT_ID_KEY, StoredMemory
from memory_bridge.sources.longterm.pool import Mem0Pool
from memory_bridge.sources.longterm.shards import resolve
from memory_bridge.sources.vector_generations import LONGTERM, Generations
from memory_bridge.tenancy.config import TokenConfig, config_secrets
from memory_bridge.tenancy.secrets import scrub

log = logging.getLogger(__name__)

# Embedding APIs reject long inputs (OpenAI: 8,191 tokens) and small local models read only
# their first 256 tokens: a pasted document must not turn a search into a 502.
MAX_QUERY_CHARS = 4000
MAX_STORED_CHARS = 8000

__all__ = ["EVENT_ID_KEY", "LayerOff", "LongTermMemory"]


class LayerOff(Exception):
    """The token has no long-term memory configured."""


class LongTermMemory:
    name = "longterm"
    on_recall_failure = OnRecallFailure.MEMORY_UNAVAILABLE

    def __init__(
        self,
        pool: Mem0Pool,
        search_timeout: float,
        store_timeout: float,
        facts: FactLog | None = None,
    ) -> None:
        self.pool = pool
        self.facts = facts or FactLog(None)
        self._search_timeout = search_timeout
        self._store_timeout = store_timeout
        # Mem0's add is read-then-write (dedup against existing memories): two adds of one
        # namespace at once could both store the same fact. One at a time per namespace.
        self._add_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._generations: Generations | None = None

    def use_generations(self, generations: Generations) -> None:
        """Bind Mem0 to the active generation of the token's long-term shard (`shards`)."""
        self._generations = generations

    def consumes(self, config: TokenConfig) -> bool:
        return mem0_config.enabled(config)

    async def recall(self, turn: Turn) -> Recall:
        config = turn.config
        if not mem0_config.enabled(config) or not turn.query:
            return Recall(source=self.name)
        ns = mem0_config.namespace(turn.scope.token_id, turn.scope.user)
        secrets = config_secrets(config)
        try:
            async with asyncio.timeout(self._search_timeout):
                spec = await self._spec(turn.scope.token_id, config)
                found = await self.pool.search(
                    spec, ns, turn.query[:MAX_QUERY_CHARS], config.memory_limit
                )
        except Exception as exc:
            cause = classify(exc)
            # The category (what the client's 502 says) and the scrubbed text; the request id
            # is on every log line.
            log.warning(
                "long-term memory search failed (%s): %s: %s",
                cause.category,
                type(exc).__name__,
                scrub(exc, secrets) or "timed out",
            )
            raise RecallFailed(self.name, cause) from exc
        return Recall(source=self.name, candidates=_candidates(self.name, found))

    async def remember(self, exchange: Exchange) -> None:
        turn = exchange.turn
        config = turn.config
        if not mem0_config.enabled(config):
            return
        messages = _to_add(exchange)
        if not messages:
            return
        spec = await self._spec(turn.scope.token_id, config, fresh=True)
        ns = mem0_config.namespace(turn.scope.token_id, turn.scope.user)
        lock = self.namespace_lock(ns)
        async with asyncio.timeout(self._store_timeout):
            await lock.acquire()
            # The namespace is held until the write has really ended, not until we stop
            # waiting for it: an attempt that times out goes on in its thread and may still
            # write, and a retry of the turn (which removes what earlier attempts wrote, then
            # adds) must not run beside it.
            write = asyncio.create_task(
                self._write(spec, ns, messages, config.memory_prompt, exchange)
            )
            write.add_done_callback(partial(_written, lock))
            added = await asyncio.shield(write)
        log.debug("long-term memory: %d memory(ies) added", added)

    async def _write(
        self,
        spec: mem0_config.Mem0Spec,
        ns: str,
        messages: list[dict[str, str]],
        prompt: str | None,
        exchange: Exchange,
    ) -> int:
        tag = {EVENT_ID_KEY: exchange.event_id} if exchange.event_id else None
        # At least once made effectively once: what an earlier attempt of this turn wrote
        # (tagged with the turn's event id) goes before the add is repeated.
        replacing = exchange.event_id if tag is not None and exchange.attempt > 1 else None
        removed, changes = await self.pool.add(
            spec, ns, messages, prompt, tag, replacing=replacing, infer=not exchange.explicit
        )
        if removed:
            log.info("long-term memory: %d memory(ies) of an earlier attempt removed", len(removed))
        user = exchange.turn.scope.user
        consolidate = exchange.turn.config.memory_config.longterm.consolidation != "off"
        stored = any(change.event in ("ADD", "UPDATE") for change in changes)
        then = (
            enqueue_after(spec.token_id, user, exchange.event_id)
            if consolidate and stored and exchange.event_id
            else None
        )
        await self.facts.turn(
            spec.token_id, user, changes, removed, exchange.event_id, spec.model_id, then
        )
        return sum(1 for change in changes if change.event == "ADD")

    async def purge(self, token_id: int) -> None:
        await self.pool.purge(token_id)

    def describe(self, config: TokenConfig) -> str:
        return mem0_config.describe(config)

    # ---- admin --------------------------------------------------------------------

    async def list_memories(
        self, token_id: int, config: TokenConfig, user: str | None
    ) -> list[StoredMemory]:
        spec = await self._spec(token_id, config)
        ns = None if user is None else mem0_config.namespace(token_id, user)
        async with asyncio.timeout(self._search_timeout):
            return await self.pool.list_memories(spec, ns)

    async def page_memories(
        self, token_id: int, config: TokenConfig, user: str | None, offset: int, limit: int
    ) -> tuple[list[StoredMemory], int]:
        """One page of the facts (storage order) and their count."""
        spec = await self._spec(token_id, config)
        ns = None if user is None else mem0_config.namespace(token_id, user)
        async with asyncio.timeout(self._search_timeout):
            return await self.pool.page_memories(spec, ns, offset, limit)

    async def search(
        self, token_id: int, config: TokenConfig, query: str, user: str | None, limit: int
    ) -> list[StoredMemory]:
        spec = await self._spec(token_id, config)
        ns = None if user is None else mem0_config.namespace(token_id, user)
        async with asyncio.timeout(self._search_timeout):
            return await self.pool.search(spec, ns, query[:MAX_QUERY_CHARS], limit)

    async def get(self, token_id: int, config: TokenConfig, memory_id: str) -> StoredMemory | None:
        spec = await self._spec(token_id, config)
        async with asyncio.timeout(self._search_timeout):
            return await self.pool.get(spec, memory_id)

    async def delete(
        self, token_id: int, config: TokenConfig, memory_id: str
    ) -> StoredMemory | None:
        """The memory deleted (logged as `longterm.deleted`), or None if there was none."""
        spec = await self._spec(token_id, config)
        async with asyncio.timeout(self._store_timeout):
            deleted = await self.pool.delete(spec, memory_id)
            if deleted is not None:
                await self.facts.deleted(token_id, [deleted], "admin")
            return deleted

    async def delete_written(
        self, token_id: int, config: TokenConfig, user: str, event_id: str
    ) -> list[StoredMemory]:
        """Every memory of the end user written for one event (a fact added through MCP),
        deleted as an admin delete is: a `longterm.deleted` event each; the memories deleted."""
        spec = await self._spec(token_id, config, fresh=True)
        ns = mem0_config.namespace(token_id, user)
        async with asyncio.timeout(self._store_timeout):
            gone = await self.pool.delete_tagged(spec, ns, event_id)
            await self.facts.deleted(token_id, gone, "admin")
        return gone

    async def update(
        self, token_id: int, config: TokenConfig, memory_id: str, text: str
    ) -> StoredMemory | None:
        """Replace a fact's text (an operator's edit), logged as `longterm.updated`."""
        spec = await self._spec(token_id, config)
        async with asyncio.timeout(self._store_timeout):
            updated = await self.pool.update(spec, memory_id, text[:MAX_STORED_CHARS])
            if updated is not None:
                await self.facts.updated(token_id, updated, spec.model_id)
            return updated

    async def delete_all(
        self, token_id: int, config: TokenConfig, user: str | None
    ) -> list[StoredMemory]:
        """One end user's memories (`user=""`: the token-wide ones), or, with `user=None`,
        every long-term memory of the token's current embedding space (the token stays);
        the memories deleted."""
        spec = await self._spec(token_id, config)
        async with asyncio.timeout(self._store_timeout):
            if user is None:
                gone = await self.pool.clear(spec)
            else:
                ns = mem0_config.namespace(token_id, user)
                gone = await self.pool.delete_namespace(spec, ns)
            await self.facts.deleted(token_id, gone, "admin")
        return gone

    async def delete_of_turns(
        self, token_id: int, config: TokenConfig, user: str, event_ids: Sequence[str], reason: str
    ) -> list[StoredMemory]:
        """The end user's facts that the turns `event_ids` added (a deleted session's), each
        deleted and logged as `longterm.deleted`; the facts deleted."""
        spec = await self._spec(token_id, config, fresh=True)
        ns = mem0_config.namespace(token_id, user)
        async with asyncio.timeout(self._store_timeout):
            gone = await self.pool.delete_of_turns(spec, ns, event_ids)
            await self.facts.deleted(token_id, gone, reason)
        return gone

    def namespace_lock(self, ns: str) -> asyncio.Lock:
        """What one namespace's writes (an add, a consolidation) take in turn."""
        lock = self._add_locks.get(ns)
        if lock is None:
            lock = self._add_locks[ns] = asyncio.Lock()
        return lock

    async def write_spec(self, token_id: int, config: TokenConfig) -> mem0_config.Mem0Spec:
        """The token's spec for a write (its active generation read afresh)."""
        return await self._spec(token_id, config, fresh=True)

    async def _spec(
        self, token_id: int, config: TokenConfig, *, fresh: bool = False
    ) -> mem0_config.Mem0Spec:
        """The token's spec, bound to its active long-term shard (`fresh`: the generation row
        read afresh, as writes do, so none misses a switch made by another process)."""
        if not mem0_config.enabled(config):
            raise LayerOff
        if self._generations is None:
            return mem0_config.build_spec(token_id, config, self.pool.mem0_dir)
        row = await self._generations.get(token_id, LONGTERM, fresh=fresh)
        unseal = self._generations.unseal_data
        return resolve(row, token_id, config, self.pool.mem0_dir, unseal).spec


def _to_add(exchange: Exchange) -> list[dict[str, str]]:
    """What Mem0 is given of a turn: its user text(s) and the final answer; of a fact stated
    on purpose (the MCP `add_memory` tool, `explicit`), that text alone, kept as it is."""
    if exchange.explicit:
        return [{"role": "user", "content": t[:MAX_STORED_CHARS]} for t in exchange.user_texts]
    reply, turn = exchange.reply, exchange.turn
    if not reply.has_text or reply.content is None:
        return []
    # A tool loop's final answer arrives with no new user message: it answers the latest one.
    users = exchange.user_texts or ((turn.query,) if turn.query else ())
    if not users:
        return []
    messages = [{"role": "user", "content": text[:MAX_STORED_CHARS]} for text in users]
    messages.append({"role": "assistant", "content": reply.content[:MAX_STORED_CHARS]})
    return messages


def _candidates(source: str, found: Sequence[StoredMemory]) -> tuple[Candidate, ...]:
    """Mem0's hits in its order (one dense list), each dated by when it was last learned.

    No `dense_score`: Mem0's facts are judged by Mem0's own threshold, on whatever embedder the
    token has; the relevance floor judges the layers whose scores it is calibrated for."""
    return tuple(
        Candidate(
            source=source,
            id=m.id,
            text=m.text,
            dense_rank=rank,
            created_at=_epoch(m.updated_at or m.created_at),
        )
        for rank, m in enumerate((m for m in found if m.text), 1)
    )


def _epoch(when: str | None) -> float | None:
    """Mem0's ISO timestamp as epoch seconds (naive: UTC); None when absent or unreadable."""
    if not when:
        return None
    try:
        parsed = datetime.fromisoformat(when)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _written(lock: asyncio.Lock, task: asyncio.Task[int]) -> None:
    """A write ended (maybe long after its caller gave up): free its namespace, and take its
    outcome so an abandoned failure is not reported as never retrieved."""
    lock.release()
    if not task.cancelled():
        task.exception()
