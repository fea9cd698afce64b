"""The memory event log and the job queue; existing sessions and curated documents backfilled.

Revision ID: 0002
Revises: 0001

Each stored message becomes one `session.appended` event (after a `session.started`), with
the message's own time, and each curated document one `curated.replaced` event, all marked
`"backfilled": true`. A migration runs once, so a second start backfills nothing. Backfilled
events get no jobs: their long-term and Gateway work was done (or lost) by the old code.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_NOW = sa.func.now()
_BATCH = 1000
_META = json.dumps({"backfilled": True, "source": "migration"})


# The aggregate ids of events/model.py as they were when this migration was written: a
# migration is frozen, and the storage layer does not import the event store above it.
def _key(*parts: object) -> str:
    return "|".join(str(p).replace("%", "%25").replace("|", "%7C") for p in parts)


def session_aggregate(token_id: int, user: str, session: str) -> str:
    return _key(token_id, user, session)


def curated_aggregate(token_id: int, kind: str, user: str) -> str:
    return _key(token_id, "curated", kind, user)


def upgrade() -> None:
    events = op.create_table(
        "memory_events",
        sa.Column("id", _BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(36), nullable=False, unique=True),
        sa.Column("token_id", sa.Integer, nullable=False),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("aggregate_id", sa.String(700), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("embed_model", sa.String(200), nullable=True),
        sa.Column("meta", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
        sa.UniqueConstraint("aggregate_id", "version", name="uq_memory_events_aggregate_version"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_memory_events_token", "memory_events", ["token_id", "id"])
    op.create_table(
        "jobs",
        sa.Column("id", _BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("consumer", sa.String(20), nullable=False),
        sa.Column("token_id", sa.Integer, nullable=False),
        sa.Column("order_key", sa.String(700), nullable=False),
        sa.Column("status", sa.String(12), nullable=False),
        sa.Column("step", sa.String(20), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("lease_owner", sa.String(80), nullable=True),
        sa.Column("lease_expires_at", sa.Float, nullable=True),
        sa.Column("next_attempt_at", sa.Float, nullable=False),
        sa.Column("last_error", sa.String(300), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.UniqueConstraint("event_id", "consumer", name="uq_jobs_event_consumer"),
    )
    op.create_index("ix_jobs_claim", "jobs", ["status", "next_attempt_at"])
    op.create_index("ix_jobs_order", "jobs", ["order_key", "consumer", "id"])
    op.create_index("ix_jobs_token", "jobs", ["token_id", "status"])
    _backfill(op.get_bind(), events)


def _backfill(conn: sa.Connection, events: sa.Table) -> None:
    batch: list[dict[str, Any]] = []
    for row in _backfilled_events(conn):
        batch.append(row)
        if len(batch) >= _BATCH:
            conn.execute(sa.insert(events), batch)
            batch = []
    if batch:
        conn.execute(sa.insert(events), batch)


def _backfilled_events(conn: sa.Connection) -> Iterator[dict[str, Any]]:
    messages = sa.table(
        "messages",
        sa.column("id"),
        sa.column("token_id"),
        sa.column("user_id"),
        sa.column("session_id"),
        sa.column("body"),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    versions: dict[str, int] = {}
    query = sa.select(messages).order_by(messages.c.id)
    for row in conn.execute(query):
        aggregate = session_aggregate(row.token_id, row.user_id, row.session_id)
        scope = {"user": row.user_id, "session": row.session_id}
        at = row.created_at or datetime.now(UTC)
        if aggregate not in versions:
            versions[aggregate] = 1
            yield _event(row.token_id, "session.started", aggregate, 1, scope, at)
        versions[aggregate] += 1
        payload = {**scope, "messages": [json.loads(row.body)]}
        yield _event(row.token_id, "session.appended", aggregate, versions[aggregate], payload, at)
    curated = sa.table(
        "curated",
        sa.column("token_id"),
        sa.column("kind"),
        sa.column("user_id"),
        sa.column("body"),
        sa.column("updated_at", sa.DateTime(timezone=True)),
    )
    for row in conn.execute(sa.select(curated).order_by(curated.c.token_id, curated.c.kind)):
        aggregate = curated_aggregate(row.token_id, row.kind, row.user_id)
        payload = {"kind": row.kind, "user": row.user_id, "body": row.body}
        at = row.updated_at or datetime.now(UTC)
        yield _event(row.token_id, "curated.replaced", aggregate, 1, payload, at)


def _event(
    token_id: int, type_: str, aggregate: str, version: int, payload: dict[str, Any], at: Any
) -> dict[str, Any]:
    return {
        "event_id": str(uuid.uuid4()),
        "token_id": token_id,
        "type": type_,
        "aggregate_id": aggregate,
        "version": version,
        "payload": json.dumps(payload, ensure_ascii=False, separators=(",", ":")),
        "embed_model": None,
        "meta": _META,
        "created_at": at,
    }
