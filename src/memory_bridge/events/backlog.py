"""Backpressure on the job queue: a bound on the jobs scheduled one by one, and batches past it.

A turn's jobs are counted against two bounds when they are enqueued: the open (pending or
running) jobs of its token, and those of every token. Under both, the jobs are `pending` as
always. Past either, the job of a consumer whose work can be merged (the episodic index:
`coalescible`) is stored `coalesced` instead: still one row per turn, committed with the turn
(nothing is lost, nothing refused), but not counted as pending and claimed only after every
due pending job, in batches. Work that cannot be merged (a Mem0 extraction, a Gateway
add→flush, a summary) is *deferred* past its token's own bound: stored `coalesced` as well,
so it too waits behind every due pending job, but run one job at a time and still in its
session's order (an open earlier job holds a later one back, whatever its status). Past only
the bound over every token, it stays `pending`: its token is within its share, and deferring
it would queue a quiet token's work behind a flood's. Each is counted (`metrics.past_bound`).

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
    claim,
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
    mine, everyone = scheduled(conn, token_id, bounds)
    return mine >= bounds.per_token or everyone >= bounds.overall


def scheduled(conn: Connection, token_id: int, bounds: Bounds) -> tuple[int, int]:
    """The token's scheduled jobs and everyone's, each counted up to its bound."""
    params = {
        "bound_token": token_id,
        "bound_per_token": bounds.per_token,
        "bound_overall": bounds.overall,
    }
    mine, everyone = conn.execute(_SCHEDULED_COUNTS, params).one()
    return int(mine), int(everyone)


@dataclass(slots=True)
class _Count:
    at: float  # time.monotonic() of the count
    count: int  # scheduled jobs then, this turn's included
    seq: int  # turns decided (counted or not) up to and including the counting one


class BoundGate:
    """Whether a turn must count the scheduled jobs, or is surely under both bounds.

    The count is a statement in every turn's transaction (~0.1 ms through the ORM core on a
    busy machine): it runs only when this process's last count, plus the turns it has enqueued
    since, could have reached a bound, or when that count is older than `recount` seconds
    (another process may have enqueued meanwhile). A flood counts every turn; a quiet token
    about once a `recount`. Approximate by the turns of other processes within `recount`, and by
    turns of this one still committing when a count was taken."""

    def __init__(self, bounds: Bounds, recount: float = 1.0) -> None:
        self.bounds = bounds
        self._recount = recount
        self._tokens: dict[int, _Count] = {}
        self._everyone = _Count(-recount, 0, 0)
        self._seq: dict[int, int] = {}
        self._all_seq = 0

    def decide(self, token_id: int) -> tuple[bool, int, int]:
        """(whether to count, the token's turn number, everyone's): call once per turn."""
        self._seq[token_id] = seq = self._seq.get(token_id, 0) + 1
        self._all_seq += 1
        now, mine, everyone = time.monotonic(), self._tokens.get(token_id), self._everyone
        sure = (
            mine is not None
            and now - mine.at < self._recount
            and now - everyone.at < self._recount
            and mine.count + seq - mine.seq < self.bounds.per_token
            and everyone.count + self._all_seq - everyone.seq < self.bounds.overall
        )
        return not sure, seq, self._all_seq

    def counted(self, token_id: int, counts: tuple[int, int], seqs: tuple[int, int]) -> None:
        """The counts a turn's transaction read (before its own jobs), once it committed."""
        if len(self._tokens) >= 10_000:  # a bounded memo, like the recorder's versions
            self._tokens.clear()
            self._seq = {token_id: seqs[0]}
        now = time.monotonic()
        self._tokens[token_id] = _Count(now, counts[0] + 1, seqs[0])
        self._everyone = _Count(now, counts[1] + 1, seqs[1])


# How a job enqueued past a bound waits (`metrics.past_bound`'s outcomes).
MERGED, DEFERRED, KEPT_PENDING = "coalesced", "deferred", "pending"


def enqueue_bounded(
    conn: Connection,
    event_id: str,
    token_id: int,
    order_key: str,
    consumers: Sequence[str],
    delays: Mapping[str, float] | None,
    bounds: Bounds | None,
) -> tuple[dict[str, str], tuple[int, int] | None]:
    """`queue.enqueue` under `bounds` (None: no count); returns, per consumer whose job was
    enqueued past a bound, how it waits (coalesced, deferred or pending), and the counts."""
    if bounds is None or not consumers:
        enqueue(conn, event_id, token_id, order_key, consumers, delays)
        return {}, None
    counts = scheduled(conn, token_id, bounds)
    own = counts[0] >= bounds.per_token
    if not own and counts[1] < bounds.overall:
        enqueue(conn, event_id, token_id, order_key, consumers, delays)
        return {}, counts
    past = {c: _waits(c, bounds, own) for c in consumers}
    statuses = {c: COALESCED for c, how in past.items() if how != KEPT_PENDING}
    enqueue(conn, event_id, token_id, order_key, consumers, delays, statuses)
    return past, counts


def _waits(consumer: str, bounds: Bounds, own: bool) -> str:
    """Merged work is coalesced past either bound; other work deferred past its token's own."""
    if consumer in bounds.coalescible:
        return MERGED
    return DEFERRED if own else KEPT_PENDING


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


def _heads(
    conn: Connection, owner: str, lease: float, limit: int, consumers: Sequence[str]
) -> list[Job]:
    """Due pending jobs first; coalesced ones only for the slots still free."""
    if limit <= 0 or not consumers:
        return []
    jobs = claim(conn, owner, limit, lease, consumers)
    if len(jobs) < limit:
        jobs += claim_coalesced(conn, owner, limit - len(jobs), lease, consumers)
    return jobs


def claim_runs(
    conn: Connection,
    owner: str,
    lease: float,
    limits: tuple[int, int],
    consumers: tuple[Sequence[str], Sequence[str]],
    size: int,
) -> list[list[Job]]:
    """What a worker runs next: up to `limits[0]` runs, each a job alone (of `consumers[0]`) or,
    at most `limits[1]` of them, a batch of up to `size` jobs of one token and one consumer of
    `consumers[1]` (the jobs claimed, then companions up to `size`)."""
    plain, batchable = consumers
    jobs = _heads(conn, owner, lease, limits[0], plain)
    jobs += _heads(conn, owner, lease, min(limits[0] - len(jobs), limits[1]), batchable)
    groups: dict[tuple[int, str], list[Job]] = {}
    runs: list[list[Job]] = []
    for job in jobs:
        if job.consumer in batchable:
            groups.setdefault((job.token_id, job.consumer), []).append(job)
        else:
            runs.append([job])
    for (token_id, consumer), group in groups.items():
        # At most `size` jobs a batch: the claimed ones cut, the last batch filled up.
        batches = [group[i : i + size] for i in range(0, len(group), size)]
        more = size - len(batches[-1])
        batches[-1] += claim_companions(conn, owner, lease, token_id, consumer, more)
        runs += batches
    return runs


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
