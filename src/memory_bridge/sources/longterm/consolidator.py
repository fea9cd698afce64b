"""Consolidation of an end user's long-term facts after an extraction: a job of the durable
queue (consumer `consolidation`), enqueued in the transaction that logs the extraction's facts.

For each fact the turn added (its points carry the turn's event id), the nearest older facts of
the same end user are read from the vector engine; `consolidate` decides (a merge of the same
fact with no LLM call; else, with `memory.longterm.consolidation: "judge"`, one call of the
memory LLM); the decision is logged first (`longterm.merged` / `longterm.superseded`), then
applied to the store, so a crash in between is repaired by the job's retry and a rebuild from
the log gives the same facts. A superseded fact is out of the store (never recalled) and kept
in its event; an admin may restore it (`longterm.restored`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

from memory_bridge.events.model import EventType, NewEvent, longterm_aggregate
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.consolidate import (
    Fact,
    InvalidVerdict,
    Plan,
    messages,
    older_than,
    parse_verdicts,
    plan_from_verdicts,
    plan_without_llm,
    to_judge,
)
from memory_bridge.sources.longterm.events import CONSUMER
from memory_bridge.sources.longterm.points import MEMORY_KIND, to_stored
from memory_bridge.sources.longterm.source import LongTermMemory
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.tenancy.longterm_config import LongTermConfig
from memory_bridge.vectors.index import Where

log = logging.getLogger(__name__)


class Consolidator:
    def __init__(self, longterm: LongTermMemory) -> None:
        self._longterm = longterm

    async def consolidate(
        self, token_id: int, config: TokenConfig, user: str, event_id: str
    ) -> int:
        """Consolidate the facts the turn `event_id` added; returns how many changed."""
        settings = config.memory_config.longterm
        if settings.consolidation == "off" or not mem0_config.enabled(config):
            return 0
        pool = self._longterm.pool
        spec = await self._longterm.write_spec(token_id, config)
        ns = mem0_config.namespace(token_id, user)
        # Not beside an add of the same end user (Mem0's add reads, then writes).
        async with self._longterm.namespace_lock(ns):
            fresh = await pool.with_memory(spec, lambda m: _tagged(m, token_id, user, event_id))
            changed = 0
            for new in fresh:
                if not await self._live(spec, new):
                    continue  # merged away by an earlier fact of this turn
                # Twice the facts judged: the later ones among the nearest are left out.
                limit = 2 * (settings.max_judged + 1)
                nearest = partial(_nearest, namespace=ns, fact=new, limit=limit)
                older = older_than(new, await pool.with_memory(spec, nearest))
                plan = plan_without_llm(new, older, settings.near_duplicate)
                if plan is None and settings.consolidation == "judge":
                    plan = await self._judge(spec, new, older, settings)
                if plan is not None and (plan.merge_into is not None or plan.supersede):
                    await self._apply(spec, token_id, user, new, plan, event_id)
                    changed += 1
        return changed

    async def _live(self, spec: mem0_config.Mem0Spec, fact: Fact) -> bool:
        return await self._longterm.pool.get(spec, fact.id) is not None

    async def _judge(
        self,
        spec: mem0_config.Mem0Spec,
        new: Fact,
        older: Sequence[Fact],
        settings: LongTermConfig,
    ) -> Plan | None:
        judged = to_judge(new, older, settings.similarity_floor, settings.max_judged)
        if not judged:
            return None
        asked = messages(new, judged)
        answer = await self._longterm.pool.with_memory(spec, lambda m: _ask(m, asked), write=True)
        try:
            relations = parse_verdicts(answer, len(judged))
        except InvalidVerdict as exc:
            # Never guessed: both facts stay. The answer's words are the user's: not logged.
            log.warning("consolidation: memory LLM answer refused, both facts kept: %s", exc)
            return None
        return plan_from_verdicts(judged, relations)

    async def _apply(
        self,
        spec: mem0_config.Mem0Spec,
        token_id: int,
        user: str,
        new: Fact,
        plan: Plan,
        event_id: str,
    ) -> None:
        events = []
        if plan.merge_into is not None:
            into = plan.merge_into
            payload = {
                "user": user,
                "memory_id": new.id,
                "text": new.text,
                "into_id": into.id,
                "into_text": into.text,
                "created_at": new.created_at,
                "into_created_at": into.created_at,
                "judged": plan.judged,
                "source_event_id": event_id or None,
            }
            aggregate = longterm_aggregate(token_id, user, new.id)
            events.append(NewEvent(EventType.LONGTERM_MERGED, aggregate, payload))
            gone = [new.id]
        else:
            for old in plan.supersede:
                payload = {
                    "user": user,
                    "memory_id": old.id,
                    "text": old.text,
                    "created_at": old.created_at,
                    "by_id": new.id,
                    "by_text": new.text,
                    "by_created_at": new.created_at,
                    "source_event_id": event_id or None,
                }
                aggregate = longterm_aggregate(token_id, user, old.id)
                events.append(NewEvent(EventType.LONGTERM_SUPERSEDED, aggregate, payload))
            gone = [old.id for old in plan.supersede]
        await self._longterm.facts.consolidated(token_id, events)
        await self._longterm.pool.with_memory(spec, lambda m: _delete(m, gone), write=True)

    async def restore(self, token_id: int, config: TokenConfig, memory_id: str) -> bool:
        """Put a superseded fact back among the live ones; False if it is not superseded."""
        facts = self._longterm.facts
        found = [f for f in await facts.superseded_facts(token_id, None) if f["id"] == memory_id]
        if not found:
            return False
        fact = found[0]
        spec = await self._longterm.write_spec(token_id, config)
        user = str(fact["user"])
        point = Fact(memory_id, str(fact["text"]), fact["learned_at"])
        ns = mem0_config.namespace(token_id, user)
        payload = {
            "user": user,
            "memory_id": memory_id,
            "text": point.text,
            "created_at": point.created_at,
            "source_event_id": None,
        }
        aggregate = longterm_aggregate(token_id, user, memory_id)
        await facts.consolidated(
            token_id, [NewEvent(EventType.LONGTERM_RESTORED, aggregate, payload)]
        )
        await self._longterm.pool.with_memory(spec, lambda m: _put(m, ns, point), write=True)
        return True


# ---- blocking, on a Mem0 instance (the pool's threads) ------------------------------------


def _tagged(memory: Any, token_id: int, user: str, event_id: str) -> list[Fact]:
    """The facts a turn stored (its event id is in their points), oldest first."""
    points = memory.vector_store.index.scroll(Where(kind=MEMORY_KIND, user=user, event_id=event_id))
    found = [to_stored(token_id, p) for p in points]
    found.sort(key=lambda m: (m.created_at or "", m.id))
    return [Fact(m.id, m.text, m.created_at) for m in found if m.text]


def _nearest(memory: Any, namespace: str, fact: Fact, limit: int) -> list[Fact]:
    """The end user's facts nearest to `fact` (itself excluded), nearest first."""
    vector = memory.embedding_model.embed(fact.text, "search")
    hits = memory.vector_store.search(
        query=fact.text, vectors=vector, top_k=limit, filters={"user_id": namespace}
    )
    out = []
    for hit in hits:
        data = hit.payload or {}
        text = data.get("data")
        if str(hit.id) != fact.id and isinstance(text, str) and hit.score is not None:
            out.append(Fact(str(hit.id), text, data.get("created_at"), float(hit.score)))
    return out


def _ask(memory: Any, asked: list[dict[str, str]]) -> str:
    answer = memory.llm.generate_response(messages=asked, response_format={"type": "json_object"})
    return answer if isinstance(answer, str) else ""


def _delete(memory: Any, ids: Sequence[str]) -> None:
    for memory_id in ids:
        if memory.get(memory_id):
            memory.delete(memory_id)


def _put(memory: Any, namespace: str, fact: Fact) -> None:
    """A fact written back as Mem0 writes one (same id, its first date)."""
    if memory.get(fact.id):
        return
    now = datetime.now(UTC).isoformat()
    vector = memory.embedding_model.embed(fact.text, "add")
    payload = {
        "data": fact.text,
        # Mem0's dedup key, computed as Mem0 computes it (not a security hash).
        "hash": hashlib.md5(fact.text.encode(), usedforsecurity=False).hexdigest(),
        "user_id": namespace,
        "created_at": fact.created_at or now,
        "updated_at": now,
    }
    memory.vector_store.insert([vector], [payload], [fact.id])


__all__ = ["CONSUMER", "Consolidator"]
