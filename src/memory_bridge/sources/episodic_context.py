"""What the keyword (BM25) side of an episodic point is indexed with: the message's own words,
counted `OWN` times, and its neighbours in the session, the `BEFORE` messages before it and the
`AFTER` messages after it, across the session's turns.

A question is often answered by the message after the one that shares its words (the reply),
or by one whose words are in the message it answers; a short reply ("yes, last Tuesday") is
found by the question it answers. Counting the message's own words twice keeps the message
that says something above its neighbours that are only near it. Measured on LoCoMo
(docs/performance.md, "Toward the multi-hop and open-domain targets").

The neighbours of a turn's first messages are in earlier turns, already indexed: the session's
last indexed messages are read back from the shard being written (from the nearest window of
time that holds enough, at most a day; a turn's messages in their position order), and the last
of them are upserted again with their new context (the same id, payload and vector). The
session's jobs run in order (their order key), and a rebuild replays the log in order, so the
neighbours are the ones said before. A turn whose neighbours are not indexed yet, or more than
a day old, gets the context its own turn gives. Explicit facts (`memory.added`) are not a
conversation: they get no neighbours and are nobody's neighbour (their session holds only
them). The dense vector embeds the message alone: embedded with its neighbours it ranked far
worse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memory_bridge.sources.episodic_points import KIND, SUMMARY, turn_point_id
from memory_bridge.vectors.index import StoredPoint, VectorIndex, VectorPoint, Where

BEFORE = 1
AFTER = 1
OWN = 2
# How far back the session's last indexed messages are looked for (seconds), nearest first:
# the read stops at the first window that holds enough, so a busy session (an import, a bot)
# reads a few recent points, never its whole day.
LOOKBACK = (1.0, 10.0, 60.0, 600.0, 3600.0, 86400.0)


@dataclass(frozen=True, slots=True)
class Session:
    """The turns of one session in a batch, in order: each turn's index in the batch and its
    indexed texts; `start` is when the first of them was recorded."""

    user: str
    session: str
    start: float
    turns: list[tuple[int, list[str]]]


def in_context(sequence: Sequence[str], at: int, before: int, after: int, own: int) -> str:
    """The text of `sequence[at]` in its context: its neighbours once, its own words `own`
    times."""
    lo, hi = max(0, at - before), min(len(sequence), at + after + 1)
    parts = [*sequence[lo:at], *[sequence[at]] * own, *sequence[at + 1 : hi]]
    return "\n".join(parts)


def tail(
    index: VectorIndex, user: str, session: str, start: float, count: int
) -> list[StoredPoint]:
    """The session's last `count` indexed messages recorded before `start`, oldest first (no
    summaries); fewer when the last day holds fewer."""
    if count <= 0:
        return []
    for lookback in LOOKBACK:
        where = Where(
            user=user,
            session=session,
            kind=KIND,
            created_from=start - lookback,
            created_before=start,
        )
        points = [p for p in index.scroll(where) if p.payload.extra.get("type") != SUMMARY]
        if len(points) >= count or lookback == LOOKBACK[-1]:
            return _ordered(points)[-count:]
    return []


def _ordered(points: Sequence[StoredPoint]) -> list[StoredPoint]:
    """Points by time, a turn's in their position order (ids derive from event and position)."""
    by_event: dict[str, list[StoredPoint]] = {}
    for point in points:
        by_event.setdefault(point.payload.event_id or "", []).append(point)
    out: list[StoredPoint] = []
    for event, group in sorted(by_event.items(), key=lambda kv: kv[1][0].payload.created_at):
        # A turn's points are its messages 0..n-1 (`EpisodicMemory.texts`).
        position = {turn_point_id(event, i): i for i in range(len(group))}
        out.extend(sorted(group, key=lambda p: position.get(p.id, len(group))))
    return out


def session_contexts(
    index: VectorIndex | None, session: Session, before: int, after: int, own: int
) -> tuple[dict[int, list[str]], list[VectorPoint]]:
    """The texts in context of a session's turns (by their index in the batch), and the earlier
    points whose context these turns extend, to be upserted again."""
    earlier = []
    if index is not None:  # no shard yet: nothing said before
        earlier = tail(index, session.user, session.session, session.start, before + after)
    sequence = [p.payload.text for p in earlier]
    for _, texts in session.turns:
        sequence.extend(texts)
    out: dict[int, list[str]] = {}
    at = len(earlier)
    for turn, texts in session.turns:
        out[turn] = [in_context(sequence, at + k, before, after, own) for k in range(len(texts))]
        at += len(texts)
    changed = earlier[max(0, len(earlier) - after) :] if after else []
    first = len(earlier) - len(changed)
    return out, _again(index, session.user, changed, sequence, first, (before, after, own))


def _again(
    index: VectorIndex | None,
    user: str,
    changed: Sequence[StoredPoint],
    sequence: Sequence[str],
    first: int,
    window: tuple[int, int, int],
) -> list[VectorPoint]:
    """The `changed` points (at `first`… of `sequence`) with their new context; a point whose
    vector cannot be read back keeps its old context."""
    if index is None or not changed:
        return []
    events = {p.payload.event_id for p in changed if p.payload.event_id}
    where = Where(user=user, kind=KIND, event_id=tuple(sorted(events)))
    vectors = {p.id: p.dense for p in index.scroll(where, with_dense=True)}
    dims = index.key.dims
    return [
        VectorPoint(
            id=p.id,
            dense=vectors.get(p.id),
            payload=p.payload,
            index_text=in_context(sequence, first + k, *window),
        )
        for k, p in enumerate(changed)
        if not dims or vectors.get(p.id)
    ]
