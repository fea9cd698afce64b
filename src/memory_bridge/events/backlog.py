"""Backpressure on the job queue: a bound on the jobs scheduled one by one, and batches past it.

A turn's jobs are counted against two bounds when they are enqueued: the open (pending or
running) jobs of its token, and those of every token. Under both, the jobs are `pending` as
always. Past either, the job of a consumer whose work can be merged (the episodic index:
`coalescible`) is stored `coalesced` instead: still one row per turn, committed with the turn
(nothing is lost, nothing refused), but not counted as pending and claimed only after every
due pending job, in batches. Work that cannot be merged (a Mem0 extraction, a Gateway
add→flush) is enqueued `pending` past the bound too, and counted (`Bounds.past`).

A worker that claims a job of a batchable consumer takes with it, in the same unit, up to
`batch - 1` more due jobs of the same token and consumer (pending or coalesced, oldest first):
one embedding call and one upsert then index them all. Those companions skip the per-session
order check: an episodic point is keyed by its event, and no turn's indexing depends on
another's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Float, Integer, bindparam, func, select, update

from memory_bridge.events.queue import (
    CLAIMED_COLUMNS,
    COALESCED,
    LEASE_VALUES,
    PENDING,
    RUNNING,
    Job,
    claimable,
    enqueue,
)
from memory_bridge.storage.tables import jobs

SCHEDULED = (PENDING, RUNNING)


@dataclass(frozen=True, slots=True)
class Bounds:
    """The bounds a turn's jobs are enqueued under (JOB_MAX_PENDING_PER_TOKEN, JOB_MAX_PENDING)."""

    per_token: int
    overall: int
    coalescible: frozenset[str]


def _count(where: Any, limit_name: str) -> Any:
    # Counted up to the bound only: under a backlog the count stops there, and the indexes
    # on (token_id, status) and (status, next_attempt_at) answer it without reading rows.
    capped = select(jobs.c.id).where(where).limit(bindparam(limit_name, type_=Integer())).subquery()
    return select(func.count()).select_from(capped).scalar_subquery()


_SCHEDULED_COUNTS = select(
    _count(
        (jobs.c.token_id == bindparam("bound_token")) & jobs.c.status.in_(SCHEDULED),
        "bound_per_token",
    ),
    _count(jobs.c.status.in_(SCHEDULED), "bound_overall"),
)


def past_bound(conn: Connection, token_id: int, bounds: Bounds) -> bool:
    """Whether the token's scheduled jobs, or everyone's, have reached their bound."""
    params = {
        "bound_token": token_id,
        "bound_per_token": bounds.per_token,
        "bound_overall": bounds.overall,
    }
    mine, everyone = conn.execute(_SCHEDULED_COUNTS, params).one()
    return int(mine) >= bounds.per_token or int(everyone) >= bounds.overall


def enqueue_bounded(
    conn: Connection,
    event_id: str,
    token_id: int,
    order_key: str,
    consumers: Sequence[str],
    delays: Mapping[str, float] | None,
    bounds: Bounds | None,
) -> tuple[str, ...]:
    """`queue.enqueue` under `bounds`; returns the consumers whose job was enqueued past the
    bound (coalesced where it can be, pending otherwise)."""
    if bounds is None or not consumers or not past_bound(conn, token_id, bounds):
        enqueue(conn, event_id, token_id, order_key, consumers, delays)
        return ()
    statuses = {c: COALESCED for c in consumers if c in bounds.coalescible}
    enqueue(conn, event_id, token_id, order_key, consumers, delays, statuses)
    return tuple(consumers)


# A coalesced job becomes a batch's first job like a pending one (due, its session's earlier
# jobs ended), but only once no due pending job is left for the slot (`claim_coalesced`).
_COALESCED_HEADS = (
    select(jobs.c.id)
    .where(
        claimable(COALESCED),
        jobs.c.consumer.in_(bindparam("claim_consumers", expanding=True)),
    )
    .order_by(jobs.c.id)
    .limit(bindparam("claim_limit", type_=Integer()))
)
_COMPANIONS = (
    select(jobs.c.id)
    .where(
        jobs.c.token_id == bindparam("batch_token"),
        jobs.c.consumer == bindparam("batch_consumer"),
        jobs.c.status.in_((PENDING, COALESCED)),
        jobs.c.next_attempt_at <= bindparam("claim_now", type_=Float()),
    )
    .order_by(jobs.c.id)
    .limit(bindparam("claim_limit", type_=Integer()))
)
_LEASE_IDS = (
    update(jobs)
    .where(jobs.c.id.in_(bindparam("claim_ids", expanding=True)))
    .values(LEASE_VALUES)
    .returning(*CLAIMED_COLUMNS)
)


def _lease(conn: Connection, chosen: Any, params: dict[str, Any], owner: str) -> list[Job]:
    """Lease the rows `chosen` selects (locked first, SKIP LOCKED, on PostgreSQL)."""
    if conn.dialect.name == "postgresql":
        chosen = chosen.with_for_update(skip_locked=True)
    ids = list(conn.execute(chosen, params).scalars())
    if not ids:
        return []
    leased = {k: params[k] for k in ("claim_now", "claim_owner", "claim_expires")}
    rows = conn.execute(_LEASE_IDS, {**leased, "claim_ids": ids}).all()
    return sorted(
        (
            Job(r.id, r.event_id, r.consumer, r.token_id, r.order_key, r.step, r.attempts, owner)
            for r in rows
        ),
        key=lambda j: j.id,
    )


def _params(owner: str, lease: float, limit: int) -> dict[str, Any]:
    now = time.time()
    return {
        "claim_now": now,
        "claim_limit": limit,
        "claim_owner": owner,
        "claim_expires": now + lease,
    }


def claim_coalesced(
    conn: Connection, owner: str, limit: int, lease: float, consumers: Sequence[str]
) -> list[Job]:
    """Lease up to `limit` claimable coalesced jobs of `consumers` (the batches' first jobs)."""
    if limit <= 0 or not consumers:
        return []
    params = {**_params(owner, lease, limit), "claim_consumers": list(consumers)}
    return _lease(conn, _COALESCED_HEADS, params, owner)


def claim_companions(
    conn: Connection, owner: str, lease: float, token_id: int, consumer: str, limit: int
) -> list[Job]:
    """Lease up to `limit` more due jobs of the token's `consumer`, oldest first, to run in
    the batch of one already claimed."""
    if limit <= 0:
        return []
    params = {
        **_params(owner, lease, limit),
        "batch_token": token_id,
        "batch_consumer": consumer,
    }
    return _lease(conn, _COMPANIONS, params, owner)


def freshness(conn: Connection) -> dict[str, float]:
    """Per consumer, how long its oldest due open job has waited since it was due (for a
    turn's job: since the turn was stored; a retried job counts from its retry's due time).
    Jobs not yet due (a summary waiting for its session to go idle) are not late."""
    now = time.time()
    query = (
        select(jobs.c.consumer, func.min(jobs.c.next_attempt_at))
        .where(jobs.c.status.in_((PENDING, RUNNING, COALESCED)), jobs.c.next_attempt_at <= now)
        .group_by(jobs.c.consumer)
    )
    return {str(c): max(0.0, now - float(due)) for c, due in conn.execute(query)}
