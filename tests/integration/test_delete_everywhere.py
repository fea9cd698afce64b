"""A delete is a delete everywhere, at once, through the real proxy: a deleted session, a
deleted long-term fact and a deleted curated document are injected in no later request (the
fake upstream records what it receives), and their words are gone from the event log, the
traces and every file under the data directory — not only from the table recall reads."""

from __future__ import annotations

import json
import sqlite3

import httpx

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.longterm_support import memories, memory_fields, wait_until
from tests.support.proxy import Proxy
from tests.support.settled import files_holding, jobs_settled

MARKER = "Zyqvorth7731"  # said in the session that is deleted
KEPT = "Plimsoll4408"  # said in another session of the same user: stays


def _say(proxy: Proxy, token: str, text: str, user: str, session: str) -> None:
    proxy.client(token).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user=user,
        extra_headers={"X-Session-Id": session},
    )


def _forwarded(upstream: FakeUpstream) -> str:
    """Everything the proxy sent upstream for the last chat request."""
    return json.dumps(upstream.proxied_requests[-1].json, ensure_ascii=False)


def _rows_holding(proxy: Proxy, marker: str) -> dict[str, int]:
    path = proxy.settings.resolved_database_url.split("///", 1)[1]
    db = sqlite3.connect(path)
    try:
        return {
            table: db.execute(
                f"select count(*) from {table} where {column} like ?", (f"%{marker}%",)
            ).fetchone()[0]
            for table, column in (
                ("memory_events", "payload"),
                ("messages", "body"),
                ("context_traces", "body"),
                ("curated", "body"),
            )
        }
    finally:
        db.close()


def _traces_of(proxy: Proxy, session: str) -> int:
    path = proxy.settings.resolved_database_url.split("///", 1)[1]
    db = sqlite3.connect(path)
    try:
        bodies = [json.loads(r[0]) for r in db.execute("select body from context_traces")]
    finally:
        db.close()
    return sum(1 for b in bodies if b.get("session") == session)


def test_a_deleted_session_is_never_injected_again(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    )
    _say(proxy, token, f"My locker code is {MARKER}", "alice", "monday")
    _say(proxy, token, f"My bike lock code is {KEPT}", "alice", "tuesday")
    wait_until(lambda: jobs_settled(proxy, token_id), what="the jobs")
    # Before the delete: episodic recall and the long-term fact carry it (and a trace quotes it).
    _say(proxy, token, "What is my locker code?", "alice", "wednesday")
    assert MARKER in _forwarded(upstream)
    assert any(MARKER in m["memory"] for m in memories(proxy, token_id, "alice"))
    wait_until(lambda: jobs_settled(proxy, token_id), what="the jobs")
    # A request of the session the upstream failed: never stored, but traced.
    upstream.enqueue(Scenario(status=500))
    failed = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "My bike lock code?"}]},
        headers={
            "Authorization": f"Bearer {token}",
            "X-User-Id": "alice",
            "X-Session-Id": "monday",
        },
        timeout=30,
    )
    assert failed.status_code == 500
    wait_until(lambda: _traces_of(proxy, "monday"), what="the failed request's trace")

    path = f"/tokens/{token_id}/sessions"
    gone = proxy.admin("DELETE", path, params={"session": "monday", "user": "alice"})
    assert gone.status_code == 204, gone.text

    # At once: no later request of alice, in any session, carries it.
    for session in ("thursday", "monday"):
        _say(proxy, token, "What is my locker code?", "alice", session)
        assert MARKER not in _forwarded(upstream)
    _say(proxy, token, "What is my bike lock code?", "alice", "friday")
    assert KEPT in _forwarded(upstream)  # the other session stays
    texts = [m["memory"] for m in memories(proxy, token_id, "alice")]
    assert not any(MARKER in t for t in texts) and any(KEPT in t for t in texts)
    wait_until(lambda: jobs_settled(proxy, token_id), what="the jobs")

    # Nowhere: not in the log, a trace, a vector shard or any file under the data directory.
    assert not any(_rows_holding(proxy, MARKER).values())
    # Of monday's traces only the one of the request asked after the delete is left.
    wait_until(lambda: _traces_of(proxy, "monday") == 1, what="monday's traces")
    data_dir = proxy.settings.memory_bridge_data_dir
    assert files_holding(data_dir, KEPT)  # the scan finds what is there
    assert files_holding(data_dir, MARKER) == []
    # The tombstone is content-free, and a second delete finds nothing.
    again = proxy.admin("DELETE", path, params={"session": "monday", "user": "bob"})
    assert again.status_code == 404


def test_a_deleted_fact_and_document_are_gone_from_log_and_traces(
    mem0_proxy: Proxy, upstream: FakeUpstream
) -> None:
    proxy = mem0_proxy
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    )
    _say(proxy, token, f"My locker code is {MARKER}", "alice", "monday")
    wait_until(lambda: jobs_settled(proxy, token_id), what="the jobs")
    _say(proxy, token, "What is my locker code?", "alice", "tuesday")  # a trace recalls it
    assert MARKER in _forwarded(upstream)
    (fact,) = [m for m in memories(proxy, token_id, "alice") if MARKER in m["memory"]]
    gone = proxy.admin("DELETE", f"/tokens/{token_id}/memories/{fact['id']}")
    assert gone.status_code == 204, gone.text
    _say(proxy, token, "What is my locker code?", "alice", "wednesday")
    forwarded = _forwarded(upstream)
    # The history of monday is its own session's: only recall could bring it here.
    assert MARKER not in forwarded
    wait_until(lambda: jobs_settled(proxy, token_id), what="the jobs")
    held = _rows_holding(proxy, MARKER)
    assert held["memory_events"] == 1  # monday's turn itself (its session was not deleted)
    assert held["context_traces"] == 0

    doc = f"# Notes\nThe vault code is {KEPT}."
    base = f"/tokens/{token_id}/curated/memory"
    assert proxy.admin("PUT", base, content=doc).status_code == 204
    assert proxy.admin("PUT", base, content=doc + "\nAnd more.").status_code == 204
    assert _rows_holding(proxy, KEPT)["memory_events"] == 2
    assert proxy.admin("DELETE", base).status_code == 204
    _say(proxy, token, "What is the vault code?", "alice", "wednesday")
    assert KEPT not in _forwarded(upstream)
    assert not any(_rows_holding(proxy, KEPT).values())
    data_dir = proxy.settings.memory_bridge_data_dir
    assert files_holding(data_dir, KEPT) == []


def test_a_deleted_sessions_unstored_requests_lose_their_traces(
    mem0_proxy: Proxy, upstream: FakeUpstream
) -> None:
    """Long-term facts alone carry no lineage: a trace of the session's request that was never
    stored is found by its end user and session."""
    proxy = mem0_proxy
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    )
    _say(proxy, token, f"My locker code is {MARKER}", "alice", "monday")
    wait_until(lambda: jobs_settled(proxy, token_id), what="the jobs")
    upstream.enqueue(Scenario(status=500))
    failed = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "My locker code?"}]},
        headers={
            "Authorization": f"Bearer {token}",
            "X-User-Id": "alice",
            "X-Session-Id": "monday",
        },
        timeout=30,
    )
    assert failed.status_code == 500
    wait_until(lambda: _traces_of(proxy, "monday") == 2, what="both of monday's traces")
    gone = proxy.admin(
        "DELETE", f"/tokens/{token_id}/sessions", params={"session": "monday", "user": "alice"}
    )
    assert gone.status_code == 204, gone.text
    assert _traces_of(proxy, "monday") == 0
    assert not any(_rows_holding(proxy, MARKER).values())
