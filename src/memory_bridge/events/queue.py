"""The durable job queue: one job per (event, consumer), leased by workers.

A job is inserted in the transaction that appends its event, so a crash keeps both or
neither. Workers claim jobs with `SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL and one
`UPDATE … RETURNING` on SQLite (whose single writer makes the update atomic); a job whose
lease expired is claimable again. Jobs of one `(token, user, session)` and consumer run in
order: a job is claimable only while no earlier job of its order key is still open (pending,
coalesced or running), so a Gateway add→flush or consecutive turns never overtake each other.

Statuses: `pending` (waiting, maybe until `next_attempt_at`), `coalesced` (waiting past the
backlog's bound, claimed after the pending jobs: in batches for the episodic index, one by one,
deferred, for other work; `events.backlog`), `running` (leased),
`done`, `failed` (retries exhausted, or refused for good) and `unknown` (its outcome cannot be
known and it must not be repeated automatically: a Gateway add that may have happened).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Float,
    Integer,
    and_,
    bindparam,
    case,
    delete,
    exists,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.orm import aliased

from memory_bridge.storage.tables import jobs

PENDING, RUNNING, DONE, FAILED, UNKNOWN = "pending", "running", "done", "failed", "unknown"
COALESCED = "coalesced"
OPEN = (PENDING, RUNNING, COALESCED)


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    event_id: str
    consumer: str
    token_id: int
    order_key: str
    step: str | None
    attempts: int
    lease_owner: str


def enqueue(
    conn: Connection,
    event_id: str,
    token_id: int,
    order_key: str,
    consumers: Sequence[str],
    delays: Mapping[str, float] | None = None,
    statuses: Mapping[str, str] | None = None,
) -> None:
    """One job per consumer, pending unless `statuses` says otherwise (`coalesced`);
    `delays`: seconds before a consumer's job is due."""
    if not consumers:
        return
    now = time.time()
    delays = delays or {}
    statuses = statuses or {}
    conn.execute(
        insert(jobs),
        [
            {
                "event_id": event_id,
                "consumer": consumer,
                "token_id": token_id,
                "order_key": order_key,
                "status": statuses.get(consumer, PENDING),
                "attempts": 0,
                "next_attempt_at": now + delays.get(consumer, 0.0),
                "created_at": now,
                "updated_at": now,
            }
            for consumer in consumers
        ],
    )


def claimable(status: str = PENDING) -> Any:
    """Jobs of `status` that are due (or running with an expired lease) and that no earlier
    open job of their order key and consumer holds back."""
    earlier = aliased(jobs)
    blocked = exists().where(
        earlier.c.order_key == jobs.c.order_key,
        earlier.c.consumer == jobs.c.consumer,
        earlier.c.id < jobs.c.id,
        earlier.c.status.in_(OPEN),
    )
    now: Any = bindparam("claim_now", type_=Float())
    due = or_(
        and_(jobs.c.status == status, jobs.c.next_attempt_at <= now),
        and_(jobs.c.status == RUNNING, jobs.c.lease_expires_at < now),
    )
    return and_(due, ~blocked)


# The claim and finish statements are built once, with bound parameters: every job runs one
# claim that finds it, one that finds nothing and one finish, and building these constructs
# (and their cache keys) per call cost the serving process's CPU on every job.
_CANDIDATES = (
    select(jobs.c.id)
    .where(claimable(), jobs.c.consumer.in_(bindparam("claim_consumers", expanding=True)))
    .order_by(jobs.c.id)
    .limit(bindparam("claim_limit", type_=Integer()))
)
CLAIMED_COLUMNS = (
    jobs.c.id,
    jobs.c.event_id,
    jobs.c.consumer,
    jobs.c.token_id,
    jobs.c.order_key,
    jobs.c.step,
    jobs.c.attempts,
)
LEASE_VALUES: dict[str, Any] = {
    "status": RUNNING,
    "lease_owner": bindparam("claim_owner"),
    "lease_expires_at": bindparam("claim_expires", type_=Float()),
    "attempts": jobs.c.attempts + 1,
    "updated_at": bindparam("claim_now", type_=Float()),
}
# SQLite: one UPDATE … RETURNING (its single writer makes it atomic).
_CLAIM_SQLITE = (
    update(jobs)
    .where(jobs.c.id.in_(_CANDIDATES.scalar_subquery()))
    .values(LEASE_VALUES)
    .returning(*CLAIMED_COLUMNS)
)
# PostgreSQL: the ids locked first (SKIP LOCKED), then leased.
_CANDIDATES_LOCKED = _CANDIDATES.with_for_update(skip_locked=True)
_CLAIM_IDS = (
    update(jobs)
    .where(jobs.c.id.in_(bindparam("claim_ids", expanding=True)))
    .values(LEASE_VALUES)
    .returning(*CLAIMED_COLUMNS)
)


def claim(
    conn: Connection, owner: str, limit: int, lease: float, consumers: Sequence[str]
) -> list[Job]:
    """Lease up to `limit` claimable jobs of `consumers` to `owner` for `lease` seconds."""
    now = time.time()
    params: dict[str, Any] = {
        "claim_now": now,
        "claim_consumers": list(consumers),
        "claim_limit": limit,
        "claim_owner": owner,
        "claim_expires": now + lease,
    }
    if conn.dialect.name == "postgresql":
        ids = list(conn.execute(_CANDIDATES_LOCKED, params).scalars())
        if not ids:
            return []
        leased = {k: params[k] for k in ("claim_now", "claim_owner", "claim_expires")}
        rows = conn.execute(_CLAIM_IDS, {**leased, "claim_ids": ids}).all()
    else:
        rows = conn.execute(_CLAIM_SQLITE, params).all()
    return sorted(
        (
            Job(r.id, r.event_id, r.consumer, r.token_id, r.order_key, r.step, r.attempts, owner)
            for r in rows
        ),
        key=lambda j: j.id,
    )


def _mine(job: Job) -> Any:
    # A worker whose lease expired and was taken over must not overwrite the new owner's work.
    return and_(
        jobs.c.id == job.id, jobs.c.lease_owner == job.lease_owner, jobs.c.status == RUNNING
    )


_FINISH = (
    update(jobs)
    .where(
        jobs.c.id == bindparam("job_id"),
        jobs.c.lease_owner == bindparam("job_owner"),
        jobs.c.status == RUNNING,
    )
    .values(
        status=bindparam("end_status"),
        lease_owner=None,
        lease_expires_at=None,
        last_error=bindparam("end_error"),
        updated_at=bindparam("end_now", type_=Float()),
    )
)


def finish(conn: Connection, job: Job, status: str = DONE, error: str | None = None) -> bool:
    result = conn.execute(
        _FINISH,
        {
            "job_id": job.id,
            "job_owner": job.lease_owner,
            "end_status": status,
            "end_error": error,
            "end_now": time.time(),
        },
    )
    return bool(result.rowcount)


_SUCCESSOR = (
    select(jobs.c.id)
    .where(
        jobs.c.order_key == bindparam("job_order_key"),
        jobs.c.consumer == bindparam("job_consumer"),
        jobs.c.id > bindparam("job_id"),
        jobs.c.status.in_((PENDING, COALESCED)),
    )
    .limit(1)
)


def successor_waiting(conn: Connection, job: Job) -> bool:
    """Whether a later job of `job`'s order key and consumer is pending: one that `job` kept
    from being claimed until it ended (a worker looks for it at once rather than at its poll)."""
    params = {"job_order_key": job.order_key, "job_consumer": job.consumer, "job_id": job.id}
    return conn.execute(_SUCCESSOR, params).first() is not None


def purge_done(conn: Connection, ended_before: float, limit: int) -> int:
    """Delete up to `limit` jobs that ended `done` before `ended_before`; how many went. A done
    job is no longer read by anything (order checks look at open jobs only), while every turn
    adds one per consumer; failed and unknown jobs wait for an operator and stay."""
    chosen = (
        select(jobs.c.id)
        # A job is claimed at or after `next_attempt_at` and ends later still: the bound on it
        # excludes nothing, and lets the claim index skip the done jobs still kept.
        .where(
            jobs.c.status == DONE,
            jobs.c.next_attempt_at < ended_before,
            jobs.c.updated_at < ended_before,
        )
        .limit(limit)
        .scalar_subquery()
    )
    return int(conn.execute(delete(jobs).where(jobs.c.id.in_(chosen))).rowcount)


def retry_later(conn: Connection, job: Job, delay: float, error: str) -> bool:
    now = time.time()
    result = conn.execute(
        update(jobs)
        .where(_mine(job))
        .values(
            status=PENDING,
            lease_owner=None,
            lease_expires_at=None,
            next_attempt_at=now + delay,
            last_error=error,
            updated_at=now,
        )
    )
    return bool(result.rowcount)


def set_step(conn: Connection, job: Job, step: str, lease: float | None = None) -> bool:
    """Record a consumer's progress inside a job (committed before the step's side effect);
    with `lease`, the job stays leased for that long from now (a long job's heartbeat)."""
    now = time.time()
    values: dict[str, Any] = {"step": step, "updated_at": now}
    if lease is not None:
        values["lease_expires_at"] = now + lease
    result = conn.execute(update(jobs).where(_mine(job)).values(values))
    return bool(result.rowcount)


def release(conn: Connection, owner: str, keep: Sequence[int] = ()) -> int:
    """Give back every job `owner` still holds (a worker stopping), but those in `keep`:
    claimable at once."""
    result = conn.execute(
        update(jobs)
        .where(jobs.c.lease_owner == owner, jobs.c.status == RUNNING, jobs.c.id.not_in(keep))
        .values(status=PENDING, lease_owner=None, lease_expires_at=None, updated_at=time.time())
    )
    return int(result.rowcount)


def renew(conn: Connection, owner: str, ids: Sequence[int], lease: float) -> int:
    """The heartbeat of a worker: the jobs `ids` it still holds stay leased `lease` seconds
    from now; how many it still held."""
    if not ids:
        return 0
    now = time.time()
    result = conn.execute(
        update(jobs)
        .where(jobs.c.lease_owner == owner, jobs.c.status == RUNNING, jobs.c.id.in_(list(ids)))
        .values(lease_expires_at=now + lease)
    )
    return int(result.rowcount)


def release_gone(conn: Connection, gone: Callable[[str], bool]) -> int:
    """Give back, claimable at once, every job leased by an owner that `gone` says is dead (a
    crashed process on this host): its lease would otherwise hold the work until it expired."""
    owners = conn.execute(
        select(jobs.c.lease_owner).where(jobs.c.status == RUNNING).distinct()
    ).scalars()
    dead = [owner for owner in owners if owner is not None and gone(owner)]
    released = 0
    for owner in dead:
        released += release(conn, owner)
    return released


def requeue(conn: Connection, token_id: int, job_id: int) -> bool:
    """An operator's retry of a failed or unknown job: pending again, with a fresh budget.

    An unknown job is replayed from its start: its step ("the add may have happened") is what
    the operator has just ruled on, so it is cleared (else the replay would end unknown again
    without sending anything). A failed job keeps its step (a Gateway add that succeeded is not
    sent again, only its flush). Attempts restart at one, not zero: the next run is still a
    retry for its consumer (Mem0 first removes what earlier attempts of the turn wrote).
    """
    now = time.time()
    result = conn.execute(
        update(jobs)
        .where(
            jobs.c.id == job_id, jobs.c.token_id == token_id, jobs.c.status.in_((FAILED, UNKNOWN))
        )
        .values(
            status=PENDING,
            step=case((jobs.c.status == UNKNOWN, None), else_=jobs.c.step),
            attempts=1,
            next_attempt_at=now,
            last_error=None,
            updated_at=now,
        )
    )
    return bool(result.rowcount)
