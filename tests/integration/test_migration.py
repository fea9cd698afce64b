"""A database made by the code before migrations (tests/fixtures/pre_migration.db, made by
tests/fixtures/make_pre_migration_db.py at commit 6f4bdf3) upgrades in place when the server
starts: its sessions and curated documents keep working and become backfilled events, once."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from memory_bridge.cli.main import _rotate_admin
from memory_bridge.server.app import create_app
from memory_bridge.storage.db import create_engine
from memory_bridge.storage.tables import metadata
from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import injected, user
from tests.support.loopback import LoopbackServer
from tests.support.proxy import REPO, Proxy, make_settings

FIXTURE = REPO / "tests" / "fixtures" / "pre_migration.db"


def _rows(db_path: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(db_path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_an_old_database_is_migrated_and_backfilled_once(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db_path = data / "memory_bridge.db"
    shutil.copy(FIXTURE, db_path)
    old_messages = _rows(db_path, "select token_id, user_id, session_id, role, body from messages")
    settings = make_settings(data)
    admin = asyncio.run(_rotate_admin(settings))  # the fixture's admin secret is not known
    for start in range(2):
        with LoopbackServer(create_app(settings)) as server:
            proxy = Proxy(server.url, admin, upstream_server[1], settings)
            events = _rows(db_path, "select type, meta, payload from memory_events order by id")
            backfilled = [e for e in events if json.loads(e[1]).get("backfilled")]
            assert [t for t, _, _ in backfilled].count("session.started") == 3
            assert [t for t, _, _ in backfilled].count("session.appended") == len(old_messages)
            assert [t for t, _, _ in backfilled].count("curated.replaced") == 2
            assert len(backfilled) == 3 + len(old_messages) + 2
            if start == 0:
                # The old token works, its history is injected, its curated document served.
                patch = proxy.admin("PATCH", "/tokens/2", json={"llm_base_url": upstream_server[1]})
                assert patch.status_code == 200, patch.text
                rotated = proxy.admin("POST", "/tokens/2/rotate").json()["token"]
                upstream.enqueue(Scenario(content="fine"))
                reply = proxy.chat(
                    rotated,
                    {"X-Session-Id": "s1", "X-User-Id": "alice"},
                    model="m",
                    messages=[user("and now?")],
                )
                assert reply.status_code == 200, reply.text
                forwarded = injected(upstream, [user("and now?")])
                assert forwarded[0]["role"] == "system"  # the curated documents
                assert "the project is MemoryBridge" in forwarded[0]["content"]
                assert "prefers tea" in forwarded[0]["content"]
                history = forwarded[1:]
                assert history[0] == {"role": "user", "content": "s1 question 0 – ünïcode"}
                assert len(history) == 6
    # The second start backfilled nothing more; only the new turn was appended.
    types = [t for (t,) in _rows(db_path, "select type from memory_events")]
    assert types.count("session.appended") == len(old_messages) + 1
    head = ScriptDirectory.from_config(_config_for_head()).get_current_head()
    assert _rows(db_path, "select version_num from alembic_version") == [(head,)]


def _config_for_head() -> Config:
    config = Config()
    config.set_main_option("script_location", "memory_bridge.storage:migrations")
    return config


def test_migrations_make_exactly_the_declared_schema(tmp_path: Path) -> None:
    """What the migrations build and what `storage.tables` declares are the same tables,
    columns and indexes, so neither can drift from the other."""
    from memory_bridge.storage.db import create_schema

    async def build() -> dict[str, Any]:
        engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}")
        try:
            await create_schema(engine)
            async with engine.connect() as conn:
                return await conn.run_sync(_describe)
        finally:
            await engine.dispose()

    built = asyncio.run(build())
    declared = {
        table.name: (
            sorted(c.name for c in table.columns),
            sorted(i.name for i in table.indexes if i.name),
        )
        for table in metadata.sorted_tables
    }
    assert built == declared


def _describe(conn: Any) -> dict[str, Any]:
    inspector = inspect(conn)
    return {
        name: (
            sorted(c["name"] for c in inspector.get_columns(name)),
            sorted(i["name"] for i in inspector.get_indexes(name) if i["name"]),
        )
        for name in inspector.get_table_names()
        if name != "alembic_version"
    }
