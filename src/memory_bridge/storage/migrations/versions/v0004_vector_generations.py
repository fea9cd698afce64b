"""Vector generations: which shard a token's layer recalls from, and its rebuild's progress.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "vector_generations",
        sa.Column("token_id", sa.Integer, primary_key=True),
        sa.Column("layer", sa.String(20), primary_key=True),
        sa.Column("active_model", sa.String(300), nullable=False),
        sa.Column("active_dims", sa.Integer, nullable=False),
        sa.Column("embedder", sa.Text, nullable=True),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("target_model", sa.String(300), nullable=True),
        sa.Column("target_dims", sa.Integer, nullable=True),
        sa.Column("reason", sa.String(20), nullable=True),
        sa.Column("event_id", sa.String(36), nullable=True),
        sa.Column(
            "checkpoint",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            server_default="0",
        ),
        sa.Column("done", sa.Integer, nullable=False, server_default="0"),
        sa.Column("total", sa.Integer, nullable=False, server_default="0"),
        sa.Column("error", sa.String(300), nullable=True),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
