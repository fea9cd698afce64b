"""Timestamps as the admin API shows them: ISO 8601 with their time zone, always.

Every time the service stores is UTC; SQLite hands them back without a zone (it stores none),
PostgreSQL with one. A naive value is therefore UTC, and says so (`+00:00`), so a client never
has to guess whether `2026-11-25T10:00:00` is its local time.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso_utc(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.isoformat()


def epoch_of(value: object) -> float | None:
    """An ISO 8601 time (naive: UTC) as epoch seconds; None when absent or unreadable."""
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
