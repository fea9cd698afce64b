"""What the MCP tools do, for one caller: a service token's config and scope (its namespace,
the end user), over the same services the chat path uses. No secret is ever in a result: the
items are memory texts, ids, dates and scores."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memory_bridge.context.forge.pipeline import Forged
from memory_bridge.context.template import block_order
from memory_bridge.core.messages import Message
from memory_bridge.core.timestamps import iso_utc
from memory_bridge.core.turn import Scope, Turn
from memory_bridge.http.mcp.schemas import AddArgs, DeleteArgs, ListArgs, ProfileArgs, SearchArgs
from memory_bridge.http.services import Services
from memory_bridge.lifecycle.explicit import ExplicitMemory, NoMemoryLayer, TokenGone
from memory_bridge.sources.curated import CuratedMemory
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.source import EVENT_ID_KEY
from memory_bridge.tenancy.config import TokenConfig


class ToolFailed(Exception):
    """A tool's refusal or failure, with the message the caller is shown (never a secret)."""


@dataclass(frozen=True, slots=True)
class Caller:
    services: Services
    config: TokenConfig
    scope: Scope  # the token's namespace and the end user (session: X-Session-Id)
    request_id: str

    def of(self, user: str | None) -> Scope:
        """The scope of a call: the tool's `user` argument wins over the header's."""
        if user is None:
            return self.scope
        if not user.isprintable():
            raise ToolFailed("user must be printable characters.")
        return Scope(token_id=self.scope.token_id, user=user, session=self.scope.session)

    @property
    def meta(self) -> dict[str, Any]:
        return {"source": "mcp", "request_id": self.request_id}

    def explicit(self) -> ExplicitMemory:
        worker = self.services.worker
        return ExplicitMemory(self.services.memory, worker.wake if worker else None)


def _date(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat()


def _iso(value: datetime | str | None) -> str | None:
    # SQLite hands times back without their zone: the admin API's rule, +00:00 stated.
    return iso_utc(value) if isinstance(value, datetime) else value


async def search_memory(caller: Caller, args: SearchArgs) -> dict[str, Any]:
    scope = caller.of(args.user)
    turn = Turn(
        request_id=caller.request_id,
        scope=scope,
        config=caller.config,
        messages=(Message(role="user", content=args.query),),
        query=args.query,
    )
    forged = await caller.services.chat.recall(turn)
    return {"user": scope.user, "items": search_items(forged, args.limit)}


def search_items(forged: Forged, limit: int) -> list[dict[str, Any]]:
    """The recall in the order a chat request places it: the curated documents (system
    prompt), the kept ranked items (source by source, each in rank order: the one memory
    block), then the Gateway's reference."""
    items: list[dict[str, Any]] = []
    for recall in forged.recalls:
        if recall.source == CuratedMemory.name:
            items.extend(
                {"source": recall.source, "text": block, "date": None, "score": None}
                for block in recall.system_blocks
            )
    ranked: list[dict[str, Any]] = []
    for recall in forged.recalls:
        for outcome in forged.kept:
            c = outcome.scored.candidate
            if c.source == recall.source:
                ranked.append(
                    {
                        "source": c.source,
                        "text": c.text,
                        "date": _date(c.created_at),
                        "score": round(outcome.scored.final, 6),
                        "rank": outcome.scored.rank,
                        "_at": c.created_at,
                    }
                )
    chosen = ranked[:limit]
    # Listed as the memory block lists them: undated first, then dated ones oldest first.
    items.extend(chosen[i] for i in block_order([item.pop("_at") for item in chosen]))
    for recall in forged.recalls:
        if recall.reference is not None:
            text = recall.reference.text()
            items.append({"source": recall.source, "text": text, "date": None, "score": None})
    return items


async def add_memory(caller: Caller, args: AddArgs) -> dict[str, Any]:
    scope = caller.of(args.user)
    try:
        fact = await caller.explicit().add(scope, caller.config, args.text, caller.meta)
    except NoMemoryLayer:
        raise ToolFailed("This token has no memory layer that can keep a fact.") from None
    except TokenGone:
        raise ToolFailed("This token no longer exists.") from None
    return {"id": fact.id, "layer": fact.layer, "user": scope.user}


async def list_memories(caller: Caller, args: ListArgs) -> dict[str, Any]:
    scope = caller.of(args.user)
    offset = int(args.cursor or 0)
    runtime = caller.services.memory
    items: list[dict[str, Any]]
    if runtime.longterm.consumes(caller.config):
        found = await runtime.longterm.list_memories(scope.token_id, caller.config, scope.user)
        window = found[offset : offset + args.limit + 1]
        items = [
            {
                "id": m.id,
                "text": m.text,
                "layer": runtime.longterm.name,
                "created_at": m.created_at,
                "added_id": m.metadata.get(EVENT_ID_KEY),
            }
            for m in window
        ]
    else:
        facts = await caller.explicit().page(scope.token_id, scope.user, offset, args.limit + 1)
        items = [
            {"id": f.id, "text": f.text, "layer": f.layer, "created_at": _iso(f.created_at)}
            for f in facts
        ]
    more = len(items) > args.limit
    return {
        "user": scope.user,
        "items": items[: args.limit],
        "next_cursor": str(offset + args.limit) if more else None,
    }


async def delete_memory(caller: Caller, args: DeleteArgs) -> dict[str, Any]:
    scope = caller.of(args.user)
    memory_id = args.id.lower()
    config = caller.config
    if await caller.explicit().delete(scope, config, memory_id, caller.meta):
        return {"deleted": memory_id}
    longterm = caller.services.memory.longterm
    if longterm.consumes(config):
        found = await longterm.get(scope.token_id, config, memory_id)
        own = mem0_config.namespace(scope.token_id, scope.user)
        mine = found is not None and found.namespace == own
        if mine and await longterm.delete(scope.token_id, config, memory_id):
            return {"deleted": memory_id}
    raise ToolFailed("No memory with that id for this user.")


async def get_profile(caller: Caller, args: ProfileArgs) -> dict[str, Any]:
    scope = caller.of(args.user)
    snapshot = await caller.services.memory.curated.snapshot(scope.token_id, scope.user)
    return {"user": scope.user, "memory_md": snapshot.memory, "user_md": snapshot.user}
