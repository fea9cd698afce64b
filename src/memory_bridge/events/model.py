"""Memory events: their types, aggregates and the shape of one event before it is appended.

Names say what happened, not how it was stored: a session is started and appended to (never
"upserted"), a curated document replaced or deleted, a long-term memory retained, updated or
deleted, an end user erased. Payloads hold text and metadata only: never vectors (a rebuild
re-embeds), never injected memory, system prompts, reasoning, or a secret (docs/events.md).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    SESSION_STARTED = "session.started"
    SESSION_APPENDED = "session.appended"
    SESSION_COMPACTED = "session.compacted"
    SESSION_DELETED = "session.deleted"
    # A summary of a session's turns by the memory LLM (sources.summaries), with its lineage.
    SESSION_SUMMARISED = "session.summarised"
    CURATED_REPLACED = "curated.replaced"
    CURATED_DELETED = "curated.deleted"
    LONGTERM_RETAINED = "longterm.retained"
    LONGTERM_UPDATED = "longterm.updated"
    LONGTERM_DELETED = "longterm.deleted"
    # Consolidation (sources.longterm.consolidate): a fact merged into an older one that says
    # the same, a fact superseded by a newer one, and an admin's restore of a superseded fact.
    LONGTERM_MERGED = "longterm.merged"
    LONGTERM_SUPERSEDED = "longterm.superseded"
    LONGTERM_RESTORED = "longterm.restored"
    USER_ERASED = "user.erased"
    # A fact stated explicitly (the MCP `add_memory` tool), indexed by the queue like a
    # turn; payload shaped like a turn's (one user message) plus `explicit: true`. Deleted,
    # its event row goes and the content-free `memory.deleted` tombstone stays.
    MEMORY_ADDED = "memory.added"
    MEMORY_DELETED = "memory.deleted"
    # An operator's (or an embedder change's) request to rebuild a layer's vectors from the
    # log; its job is the rebuild (lifecycle.rebuild). Payload: layer, reason, model id.
    INDEX_REBUILD_REQUESTED = "index.rebuild_requested"


def _key(*parts: object) -> str:
    # `|` separates the parts; one inside a part (a user id may hold anything printable) is
    # escaped, so two different scopes never share an aggregate id.
    return "|".join(str(p).replace("%", "%25").replace("|", "%7C") for p in parts)


def session_aggregate(token_id: int, user: str, session: str) -> str:
    return _key(token_id, user, session)


def curated_aggregate(token_id: int, kind: str, user: str) -> str:
    return _key(token_id, "curated", kind, user)


def longterm_aggregate(token_id: int, user: str, memory_id: str) -> str:
    return _key(token_id, user, "longterm", memory_id)


def memory_aggregate(token_id: int, user: str, memory_id: str) -> str:
    return _key(token_id, user, "memory", memory_id)


def user_aggregate(token_id: int, user: str) -> str:
    return _key(token_id, "user", user)


def index_aggregate(token_id: int, layer: str) -> str:
    return _key(token_id, "index", layer)


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended; the log gives it its id, version and time."""

    type: EventType
    aggregate_id: str
    payload: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    embed_model: str | None = None
    event_id: str = field(default_factory=lambda: str(uuid.uuid4()))


@dataclass(frozen=True, slots=True)
class StoredEvent:
    id: int
    event_id: str
    token_id: int
    type: str
    aggregate_id: str
    version: int
    payload: dict[str, Any]
    meta: dict[str, Any]
    embed_model: str | None
    created_at: datetime
