"""The episodic index's points: a turn's messages and session summaries as stored, their ids
(derived from events, so a retry or a rebuild overwrites) and their lineage for the forge."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memory_bridge.core.candidates import importance_of
from memory_bridge.core.entities import Entity
from memory_bridge.sources.base import Exchange
from memory_bridge.sources.relational import GraphHit
from memory_bridge.vectors.index import PointPayload, VectorPoint

KIND = "episodic"
_IDS = uuid.UUID("6f1d0c36-64c1-4a57-9a38-1d2b58e0b8a5")


SUMMARY = "summary"  # a point's `extra.type` when it is a session summary


@dataclass(frozen=True, slots=True)
class SummaryPoint:
    """A session summary (`session.summarised`) as the episodic index keeps it."""

    token_id: int
    user: str
    session: str
    summary_id: str  # the summary event's id
    text: str
    covers: tuple[str, ...]  # the `session.appended` event ids it summarises
    created_at: float  # when the last covered turn was stored
    importance: float | None = None  # the memory LLM's, 0..1; None: the default

    @property
    def extra(self) -> dict[str, Any]:
        """The point's `extra` payload: its type, lineage and importance (when it has one)."""
        extra: dict[str, Any] = {"type": SUMMARY, "covers": list(self.covers)}
        if self.importance is not None:
            extra["importance"] = self.importance
        return extra


def turn_point_id(event_id: str, i: int) -> str:
    """The index point id of a turn's `i`-th indexed message."""
    return str(uuid.uuid5(_IDS, f"{event_id}:{i}"))


def summary_point_id(summary_id: str) -> str:
    """The index point id of a session summary (its `session.summarised` event's id)."""
    return str(uuid.uuid5(_IDS, f"summary:{summary_id}"))


def _summary_lineage(extra: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A summary's lineage for the forge: its type and the turns (event ids) it covers."""
    covers = extra.get("covers")
    if extra.get("type") != SUMMARY or not isinstance(covers, list):
        return []
    return [("type", SUMMARY), ("covers", ",".join(str(c) for c in covers))]


def importance(payload: PointPayload) -> float | None:
    """A point's own importance (a session summary's, from the memory LLM), else None."""
    return importance_of(payload.extra.get("importance")) if payload.extra else None


def turn_point(
    exchange: Exchange,
    i: int,
    text: str,
    in_context: str,
    created_at: float,
    vector: list[float],
    entities: Callable[[str], Sequence[Entity]],
) -> VectorPoint:
    """The point of a turn's `i`-th indexed message (its id derives from the event)."""
    scope = exchange.turn.scope
    return VectorPoint(
        id=turn_point_id(exchange.event_id, i),
        dense=vector or None,
        payload=PointPayload(
            user=scope.user,
            kind=KIND,
            text=text,
            session=scope.session,
            event_id=exchange.event_id or None,
            created_at=created_at,
            entities=tuple(e.key for e in entities(text)),
        ),
        index_text=in_context,
    )


def lineage(payload: PointPayload, walked: GraphHit | None) -> dict[str, str]:
    pairs = (
        ("event_id", payload.event_id),
        ("session", payload.session),
        *_summary_lineage(payload.extra),
    )
    out = {k: v for k, v in pairs if v}
    if walked is not None:
        out["via"] = f"entity {walked.via} (depth {walked.depth})"
    return out
