"""The memory event log as the source of truth: what chat and the admin API write arrives as
events with their projections, and dropping every projection and replaying the log gives
byte-identical session history and curated documents."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from memory_bridge.events.log import rebuild_projections
from memory_bridge.storage.db import create_engine
from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import user
from tests.support.proxy import Proxy


def _rows(db_path: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(db_path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def _projections(db_path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    return (
        _rows(db_path, "select * from messages order by id"),
        _rows(db_path, "select * from curated order by token_id, kind, user_id"),
    )


def _drive(proxy: Proxy, upstream: FakeUpstream) -> int:
    token_id, token = proxy.create_token()
    for user_id, session in [("alice", "s1"), ("alice", "s2"), ("bob", "s1"), ("", "default")]:
        for i in range(3):
            upstream.enqueue(Scenario(content=f"reply {i} to {user_id}/{session} – ünï"))
            reply = proxy.chat(
                token,
                {"X-Session-Id": session, "X-User-Id": user_id},
                model="m",
                messages=[user(f"turn {i} from {user_id} in {session}")],
            )
            assert reply.status_code == 200, reply.text
    for kind, body, params in [
        ("memory", "# Memory\n- first\n", {}),
        ("memory", "# Memory\n- second, replacing the first\n", {}),
        ("user", "# Alice\n- likes tea\n", {"user": "alice"}),
    ]:
        put = proxy.admin("PUT", f"/tokens/{token_id}/curated/{kind}", content=body, params=params)
        assert put.status_code in (200, 204), put.text
    return token_id


def test_turns_and_curated_documents_are_events_with_projections(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _drive(proxy, upstream)
    db_path = proxy.settings.memory_bridge_data_dir / "memory_bridge.db"
    events = _rows(
        db_path, "select type, aggregate_id, version, payload, meta from memory_events order by id"
    )
    types = [e[0] for e in events]
    assert types.count("session.started") == 4
    assert types.count("session.appended") == 12
    assert types.count("curated.replaced") == 3
    versions: dict[str, list[int]] = {}
    for _, aggregate, version, _, _ in events:
        versions.setdefault(aggregate, []).append(version)
    assert all(v == list(range(1, len(v) + 1)) for v in versions.values())
    appended = [json.loads(e[3]) for e in events if e[0] == "session.appended"]
    assert appended[0]["messages"][0] == {"role": "user", "content": "turn 0 from alice in s1"}
    assert appended[0]["messages"][1]["role"] == "assistant"
    assert all("request_id" in json.loads(e[4]) for e in events if e[0] == "session.appended")


def test_replaying_the_log_gives_byte_identical_projections(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _drive(proxy, upstream)
    db_path = proxy.settings.memory_bridge_data_dir / "memory_bridge.db"
    before = _projections(db_path)
    assert len(before[0]) == 24 and len(before[1]) == 2

    async def rebuild() -> int:
        engine = create_engine(f"sqlite+aiosqlite:///{db_path}")
        try:
            async with engine.begin() as conn:
                return await conn.run_sync(rebuild_projections)
        finally:
            await engine.dispose()

    replayed = asyncio.run(rebuild())
    assert replayed == 4 + 12 + 3
    assert _projections(db_path) == before
