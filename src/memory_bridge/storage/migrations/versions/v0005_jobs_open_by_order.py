"""Jobs: the order index also holds the status, so "is an earlier job of this order still open"
is a seek, not a walk over every finished job of the session.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_jobs_order", table_name="jobs")
    op.create_index("ix_jobs_order_status", "jobs", ["order_key", "consumer", "status", "id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_order_status", table_name="jobs")
    op.create_index("ix_jobs_order", "jobs", ["order_key", "consumer", "id"])
