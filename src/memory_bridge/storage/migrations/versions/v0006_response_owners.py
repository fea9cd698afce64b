"""Response owners: which token created each stored Responses API response.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "response_owners",
        sa.Column("token_id", sa.Integer, primary_key=True),
        sa.Column("response_id", sa.String(200), primary_key=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("instructions", sa.Integer, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("response_owners")
