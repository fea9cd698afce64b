"""Context traces: what each chat request with memory was given, and why.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "context_traces",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("token_id", sa.Integer, nullable=False),
        sa.Column("request_id", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("ix_context_traces_request", "context_traces", ["token_id", "request_id"])
    op.create_index("ix_context_traces_age", "context_traces", ["token_id", "created_at"])
