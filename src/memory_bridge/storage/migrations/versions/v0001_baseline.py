"""The schema as it was before migrations: tokens, session messages, audit events, curated.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_NOW = sa.func.now()


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("is_admin", sa.Boolean, nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("config", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "messages",
        sa.Column("id", _BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("token_id", sa.Integer, nullable=False),
        sa.Column("user_id", sa.String(200), nullable=False),
        sa.Column("session_id", sa.String(200), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    )
    op.create_index("ix_messages_scope", "messages", ["token_id", "user_id", "session_id", "id"])
    op.create_table(
        "events",
        sa.Column("id", _BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("token_id", sa.Integer, nullable=False),
        sa.Column("user_id", sa.String(200), nullable=False),
        sa.Column("session_id", sa.String(200), nullable=False),
        sa.Column("type", sa.String(80), nullable=False),
        sa.Column("request_id", sa.String(16), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    )
    op.create_index("ix_events_token", "events", ["token_id", "id"])
    op.create_table(
        "curated",
        sa.Column("token_id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(10), primary_key=True),
        sa.Column("user_id", sa.String(200), primary_key=True),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    )
