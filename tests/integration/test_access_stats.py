"""The access stats store on a real database (SQLite; PostgreSQL when it runs): uses are noted
in memory and written in a batch (not one write per use), read back per token and end user
only, the latest time winning and the uses adding up; an erasure's `forget_user` drops what was
not written; the buffer is bounded."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from memory_bridge.storage import access
from memory_bridge.storage.access import AccessStats
from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import memory_access


async def _rows(db: Database) -> int:
    return int(
        await db.run(lambda c: c.execute(select(func.count()).select_from(memory_access)).scalar())
    )


async def test_uses_are_written_in_a_batch_and_read_per_end_user(db: Database) -> None:
    stats = AccessStats(db, flush_interval=3600)  # only an explicit settle writes here
    stats.touch(1, "ada", [("episodic", "p1", None), ("longterm", "m1", 0.8)], at=100.0)
    stats.touch(1, "ada", [("episodic", "p1", None)], at=200.0)
    assert await _rows(db) == 0  # noted, not written: no write per use
    await stats.settle()
    assert await _rows(db) == 2  # one batch
    rows = await stats.of_user(1, "ada", 10)
    assert [(r.source, r.item_id, r.last_used_at, r.uses) for r in rows] == [
        ("episodic", "p1", 200.0, 2),
        ("longterm", "m1", 100.0, 1),
    ]
    assert rows[1].importance == 0.8
    # Another batch: the later time wins (an older one never moves it back), the uses add up.
    stats.touch(1, "ada", [("episodic", "p1", None)], at=300.0)
    stats.touch(1, "ada", [("longterm", "m1", 0.8)], at=50.0)
    await stats.settle()
    read = await stats.last_used(1, "ada", [("episodic", "p1"), ("longterm", "m1")])
    assert read == {"episodic:p1": 300.0, "longterm:m1": 100.0}
    assert [r.uses for r in await stats.of_user(1, "ada", 10)] == [3, 2]
    # Per token and end user: the same ids mean nothing for anyone else.
    assert await stats.last_used(1, "bob", [("episodic", "p1")]) == {}
    assert await stats.last_used(2, "ada", [("episodic", "p1")]) == {}
    # The source is part of the identity.
    assert await stats.last_used(1, "ada", [("longterm", "p1")]) == {}


async def test_an_unwritten_use_is_read_at_once_and_dropped_by_forget_user(db: Database) -> None:
    stats = AccessStats(db, flush_interval=3600)
    stats.touch(1, "ada", [("episodic", "p1", None)], at=100.0)
    stats.touch(1, "bob", [("episodic", "p1", None)], at=100.0)
    assert await stats.last_used(1, "ada", [("episodic", "p1")]) == {"episodic:p1": 100.0}
    await stats.forget_user(1, "ada")
    assert await stats.last_used(1, "ada", [("episodic", "p1")]) == {}
    await stats.settle()
    assert await stats.of_user(1, "ada", 10) == []
    assert [r.item_id for r in await stats.of_user(1, "bob", 10)] == ["p1"]
    erased = await db.write(lambda conn: access.erase_user(conn, 1, "bob"))
    assert erased == 1 and await stats.of_user(1, "bob", 10) == []
    await stats.close()


async def test_the_buffer_is_bounded(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access, "MAX_PENDING", 3)
    stats = AccessStats(db, flush_interval=3600)
    stats.touch(1, "ada", [("episodic", f"p{i}", None) for i in range(5)], at=100.0)
    stats.touch(1, "ada", [("episodic", "p0", None)], at=200.0)  # a known item still updates
    found = await stats.last_used(1, "ada", [("episodic", f"p{i}") for i in range(5)])
    assert found == {"episodic:p0": 200.0, "episodic:p1": 100.0, "episodic:p2": 100.0}
    await stats.purge(1)
    assert await stats.of_user(1, "ada", 10) == []
