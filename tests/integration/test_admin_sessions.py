"""A token's end users and sessions through the admin API: listed with message counts and last
activity, one session's history read page by page, one session deleted (a `session.deleted`
event; the next request of that session starts afresh), a curated document deleted."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from memory_bridge.events.log import rebuild_projections
from memory_bridge.storage.db import create_engine
from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import assistant, injected, user
from tests.support.proxy import Proxy

ODD_SESSION = "chat/42?x=1 & more"  # any printable id: a query parameter, not a path segment


def _chat(proxy: Proxy, token: str, text: str, session: str, who: str | None = None) -> None:
    body: dict[str, Any] = {"model": "m", "messages": [user(text)]}
    if who is not None:
        body["user"] = who
    reply = proxy.chat(token, {"X-Session-Id": session}, **body)
    assert reply.status_code == 200, reply.text


def _get(proxy: Proxy, path: str, **params: Any) -> Any:
    reply = proxy.admin("GET", path, params=params)
    assert reply.status_code == 200, reply.text
    return reply.json()


def _db(proxy: Proxy) -> Path:
    return proxy.settings.memory_bridge_data_dir / "memory_bridge.db"


def _seed(proxy: Proxy, upstream: FakeUpstream) -> tuple[int, str]:
    token_id, token = proxy.create_token()
    upstream.responder = lambda body: Scenario(content="ok: " + body["messages"][-1]["content"])
    _chat(proxy, token, "a1", "alpha", "alice")
    _chat(proxy, token, "a2", "alpha", "alice")
    _chat(proxy, token, "o1", ODD_SESSION, "alice")
    _chat(proxy, token, "b1", "beta", "bob smith")
    _chat(proxy, token, "anon", "default")
    return token_id, token


def test_users_and_sessions_are_listed_with_counts_and_activity(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, _ = _seed(proxy, upstream)
    users = _get(proxy, f"/tokens/{token_id}/users")
    assert [(u["user"], u["sessions"], u["messages"]) for u in users["data"]] == [
        ("", 1, 2),  # the most recently active first
        ("bob smith", 1, 2),
        ("alice", 2, 6),
    ]
    assert users["has_more"] is False
    assert all(u["last_activity"] for u in users["data"])

    sessions = _get(proxy, f"/tokens/{token_id}/sessions")["data"]
    assert [(s["user"], s["session"], s["messages"]) for s in sessions] == [
        ("", "default", 2),
        ("bob smith", "beta", 2),
        ("alice", ODD_SESSION, 2),
        ("alice", "alpha", 4),
    ]
    alpha = sessions[-1]
    assert alpha["first_activity"] <= alpha["last_activity"]
    mine = _get(proxy, f"/tokens/{token_id}/sessions", user="alice")["data"]
    assert [s["session"] for s in mine] == [ODD_SESSION, "alpha"]
    # Paging.
    page = _get(proxy, f"/tokens/{token_id}/sessions", limit=3, offset=1)
    assert [s["session"] for s in page["data"]] == ["beta", ODD_SESSION, "alpha"]
    assert page["has_more"] is False
    assert _get(proxy, f"/tokens/{token_id}/sessions", limit=2)["has_more"] is True
    assert _get(proxy, f"/tokens/{token_id}/users", limit=1, offset=2)["data"][0]["user"] == (
        "alice"
    )
    # Another token sees none of it.
    other_id, _ = proxy.create_token(name="other")
    assert _get(proxy, f"/tokens/{other_id}/sessions")["data"] == []
    assert proxy.admin("GET", "/tokens/999/sessions").status_code == 404


def test_a_sessions_history_is_read_page_by_page(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, _ = _seed(proxy, upstream)
    path = f"/tokens/{token_id}/sessions/messages"
    first = _get(proxy, path, session="alpha", user="alice", limit=3)
    assert [m["message"] for m in first["data"]] == [
        user("a1"),
        assistant("ok: a1"),
        user("a2"),
    ]
    assert [m["role"] for m in first["data"]] == ["user", "assistant", "user"]
    assert first["next_after"] == first["data"][-1]["id"]
    rest = _get(proxy, path, session="alpha", user="alice", after=first["next_after"], limit=3)
    assert [m["message"] for m in rest["data"]] == [assistant("ok: a2")]
    assert rest["next_after"] is None
    odd = _get(proxy, path, session=ODD_SESSION, user="alice")
    assert [m["message"]["content"] for m in odd["data"]] == ["o1", "ok: o1"]
    # The token-wide user is the default; an unknown session is an empty page.
    assert len(_get(proxy, path, session="default")["data"]) == 2
    assert _get(proxy, path, session="alpha")["data"] == []
    assert proxy.admin("GET", path).status_code == 422  # `session` is required


def test_deleting_a_session_forgets_its_history_and_only_it(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = _seed(proxy, upstream)
    path = f"/tokens/{token_id}/sessions"
    gone = proxy.admin("DELETE", path, params={"session": "alpha", "user": "alice"})
    assert gone.status_code == 204, gone.text
    assert _get(proxy, f"{path}/messages", session="alpha", user="alice")["data"] == []
    left = {(s["user"], s["session"]) for s in _get(proxy, path)["data"]}
    assert left == {("alice", ODD_SESSION), ("bob smith", "beta"), ("", "default")}

    # The session's next request starts without history; another session keeps its own.
    _chat(proxy, token, "fresh", "alpha", "alice")
    assert injected(upstream, [user("fresh")]) == []
    _chat(proxy, token, "again", ODD_SESSION, "alice")
    assert injected(upstream, [user("again")]) == [user("o1"), assistant("ok: o1")]

    again = proxy.admin("DELETE", path, params={"session": "nope", "user": "alice"})
    assert again.status_code == 404
    assert proxy.admin("DELETE", path, params={"user": "alice"}).status_code == 422

    # It is an event of the log, and a replay of the log gives the same history.
    db = sqlite3.connect(_db(proxy))
    try:
        events = db.execute(
            "select payload, meta from memory_events where type = 'session.deleted'"
        ).fetchall()
        assert len(events) == 1
        assert '"session":"alpha"' in events[0][0] and '"source":"admin"' in events[0][1]
        before = db.execute("select * from messages order by id").fetchall()
    finally:
        db.close()

    async def rebuild() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{_db(proxy)}")
        try:
            async with engine.begin() as conn:
                await conn.run_sync(rebuild_projections)
        finally:
            await engine.dispose()

    asyncio.run(rebuild())
    db = sqlite3.connect(_db(proxy))
    try:
        after = db.execute("select * from messages order by id").fetchall()
    finally:
        db.close()
    assert [row[1:] for row in after] == [row[1:] for row in before]


def test_deleting_a_curated_document(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = proxy.create_token()
    base = f"/tokens/{token_id}/curated"
    assert proxy.admin("PUT", f"{base}/memory", content=b"The sky is green.").status_code == 204
    assert proxy.admin("PUT", f"{base}/user", content=b"Everyone likes tea.").status_code == 204
    put = proxy.admin("PUT", f"{base}/user", params={"user": "ann"}, content=b"Ann likes coffee.")
    assert put.status_code == 204
    _chat(proxy, token, "hi", "s", "ann")
    system = upstream.proxied_requests[-1].json["messages"][0]["content"]
    assert "The sky is green." in system and "Ann likes coffee." in system

    assert proxy.admin("DELETE", f"{base}/memory").status_code == 204
    assert proxy.admin("DELETE", f"{base}/user", params={"user": "ann"}).status_code == 204
    assert proxy.admin("GET", f"{base}/memory").text == ""
    # At once (the snapshot cache is dropped): Ann gets the token-wide USER.md again.
    _chat(proxy, token, "hi again", "s", "ann")
    system = upstream.proxied_requests[-1].json["messages"][0]["content"]
    assert "The sky is green." not in system and "Ann likes coffee." not in system
    assert "Everyone likes tea." in system

    assert proxy.admin("DELETE", f"{base}/memory").status_code == 404
    assert proxy.admin("DELETE", f"{base}/memory", params={"user": "ann"}).status_code == 422
    assert proxy.admin("DELETE", "/tokens/999/curated/memory").status_code == 404
    db = sqlite3.connect(_db(proxy))
    try:
        kinds = db.execute(
            "select payload from memory_events where type = 'curated.deleted' order by id"
        ).fetchall()
    finally:
        db.close()
    assert kinds == [('{"kind":"memory","user":""}',), ('{"kind":"user","user":"ann"}',)]
