"""Memory access stats: when each recalled memory was last injected (fading).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_access",
        sa.Column("token_id", sa.Integer, primary_key=True),
        sa.Column("user_id", sa.String(200), primary_key=True),
        sa.Column("source", sa.String(20), primary_key=True),
        sa.Column("item_id", sa.String(100), primary_key=True),
        sa.Column("last_used_at", sa.Float, nullable=False),
        sa.Column("importance", sa.Float, nullable=True),
        sa.Column("uses", sa.Integer, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("memory_access")
