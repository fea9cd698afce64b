"""Erasing an end user through the real proxy: what alice said is gone from every file and
log line (the database and its WAL, the vector shards), a replay of the event log does not
bring it back, and bob and another token keep everything."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from memory_bridge.events.log import rebuild_projections
from memory_bridge.storage.tables import memory_events, messages
from tests.fakes.upstream import FakeUpstream
from tests.support.longterm_support import (
    forwarded_recall,
    memories,
    memory_fields,
    wait_until,
)
from tests.support.proxy import Proxy
from tests.support.settled import files_holding, jobs_settled

MARKER = "Zyqvorth7731"  # alice's secret on the erased token
KEPT = "Plimsoll4408"  # alice's secret on another token: stays


def _say(proxy: Proxy, token: str, text: str, user: str, session: str) -> None:
    proxy.client(token).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user=user,
        extra_headers={"X-Session-Id": session},
    )


def _sqlite_path(proxy: Proxy) -> Path:
    return Path(proxy.settings.resolved_database_url.split("///", 1)[1])


def test_erasing_alice_leaves_no_trace_of_her_words(
    proxy: Proxy, upstream: FakeUpstream, logs: pytest.LogCaptureFixture
) -> None:
    embed = memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    token_id, token = proxy.create_token(**embed)
    other_id, other = proxy.create_token(name="other", **embed)
    _say(proxy, token, f"My locker code is {MARKER}", "alice", "monday")
    _say(proxy, token, f"Remember {MARKER} for the gym", "alice", "tuesday")
    _say(proxy, token, "My bike is green", "bob", "monday")
    _say(proxy, other, f"My locker code is {KEPT}", "alice", "monday")
    doc = f"# Alice\nHer locker code is {MARKER}."
    put = proxy.admin(
        "PUT", f"/tokens/{token_id}/curated/user", params={"user": "alice"}, content=doc
    )
    assert put.status_code == 204
    wait_until(
        lambda: jobs_settled(proxy, token_id) and jobs_settled(proxy, other_id), what="the jobs"
    )
    _say(proxy, token, "What is my locker code?", "alice", "wednesday")  # a trace recalling it
    assert MARKER in forwarded_recall(upstream)
    wait_until(lambda: jobs_settled(proxy, token_id), what="the last turn's jobs")

    erased = proxy.admin("DELETE", f"/tokens/{token_id}/users/alice")
    assert erased.status_code == 200, erased.text
    counts = erased.json()["counts"]
    assert counts["messages"] == 6 and counts["sessions"] == 3 and counts["curated"] == 1
    assert counts["episodic"] == 6 and counts["longterm"] == 3  # her 3 sayings, as facts
    assert counts["traces"] >= 1 and counts["events"] >= 7
    assert erased.json()["longterm"] == "erased"
    again = proxy.admin("DELETE", f"/tokens/{token_id}/users/alice")
    assert again.status_code == 200 and not any(again.json()["counts"].values())
    # Any user id the chat path stores can be named, `/` included; bad ones are refused.
    odd = proxy.admin("DELETE", f"/tokens/{token_id}/users/team%2Fbob%20b")
    assert odd.status_code == 200 and odd.json()["user"] == "team/bob b"
    assert proxy.admin("DELETE", f"/tokens/{token_id}/users/{'u' * 201}").status_code == 422
    assert proxy.admin("DELETE", f"/tokens/{token_id + 99}/users/alice").status_code == 404

    # Nothing of alice through the API: sessions, memories, her USER.md, recall.
    assert (
        proxy.admin("GET", f"/tokens/{token_id}/sessions", params={"user": "alice"}).json()["data"]
        == []
    )
    assert memories(proxy, token_id, "alice") == []
    assert (
        proxy.admin("GET", f"/tokens/{token_id}/curated/user", params={"user": "alice"}).text == ""
    )
    _say(proxy, token, "What is my locker code?", "alice", "thursday")
    assert MARKER not in forwarded_recall(upstream)
    # Bob and the other token keep theirs.
    _say(proxy, token, "What colour is my bike?", "bob", "friday")
    assert "My bike is green" in forwarded_recall(upstream)
    assert any(KEPT in m["memory"] for m in memories(proxy, other_id, "alice"))
    _say(proxy, other, "What is my locker code?", "alice", "friday")
    assert KEPT in forwarded_recall(upstream)
    wait_until(
        lambda: jobs_settled(proxy, token_id) and jobs_settled(proxy, other_id), what="the jobs"
    )

    # The files: the database and its WAL, every vector shard; and every log line.
    database = _sqlite_path(proxy)
    data_dir = proxy.settings.memory_bridge_data_dir
    assert files_holding(database.parent, KEPT)  # the scan finds what is there
    assert [p for p in files_holding(database.parent, MARKER) if p.startswith(database.name)] == []
    assert files_holding(data_dir / "vectors", MARKER) == []
    # Nowhere else under the data directory either (Mem0's history is kept in memory).
    assert files_holding(data_dir, MARKER) == []
    assert files_holding(data_dir / "vectors", KEPT)
    assert not [r for r in logs.records if MARKER in r.getMessage()]

    # A replay of the whole log does not bring her history back.
    engine = create_engine(f"sqlite:///{database}")
    try:
        with engine.begin() as conn:
            rebuild_projections(conn)
        with engine.connect() as conn:
            users = {r.user_id for r in conn.execute(select(messages.c.user_id))}
            bodies = [r.payload for r in conn.execute(select(memory_events.c.payload))]
    finally:
        engine.dispose()
    assert "bob" in users and all(MARKER not in body for body in bodies)
    alice_rows = _alice_rows_after_replay(database, token_id)
    assert alice_rows == 2  # thursday's question and its reply, said after the erasure


def _alice_rows_after_replay(database: Path, token_id: int) -> int:
    engine = create_engine(f"sqlite:///{database}")
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(messages.c.body).where(
                    messages.c.token_id == token_id, messages.c.user_id == "alice"
                )
            ).all()
    finally:
        engine.dispose()
    assert all(MARKER not in r.body for r in rows)
    return len(rows)
