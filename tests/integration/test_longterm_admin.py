"""Admin API for long-term memories: list (paged), search, get, delete one, delete all."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from tests.fakes.upstream import FakeUpstream
from tests.support.longterm_support import (
    EMBED_KEY,
    MEMORY_LLM_KEY,
    chat,
    forwarded_recall,
    memories,
    memory_block,
    memory_fields,
    memory_texts,
    wait_until,
)
from tests.support.proxy import Proxy

FACTS = {
    "": ["Our office is in Porto", "Our standup is at nine"],
    "alice": ["My sister is called Maria", "My favourite fruit is mango"],
    "bob": ["My bike is green"],
}


def _seed(proxy: Proxy) -> tuple[int, str]:
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    for user, facts in FACTS.items():
        for fact in facts:
            assert chat(proxy, token, fact, user=user or None).status_code == 200
    wanted = {f for facts in FACTS.values() for f in facts}
    wait_until(lambda: memory_texts(proxy, token_id) == wanted, what="seeded memories")
    return token_id, token


def _get(proxy: Proxy, path: str, **params: Any) -> Any:
    reply = proxy.admin("GET", path, params=params)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_list_is_paged_and_scoped_by_user(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, _ = _seed(proxy)
    base = f"/tokens/{token_id}/memories"
    everything = _get(proxy, base)
    assert everything["total"] == 5 and len(everything["data"]) == 5
    item = everything["data"][0]
    assert set(item) == {"id", "memory", "user", "created_at", "updated_at"}
    assert {(m["user"], m["memory"]) for m in everything["data"]} == {
        (user, fact) for user, facts in FACTS.items() for fact in facts
    }
    created = [m["created_at"] for m in everything["data"]]
    assert created == sorted(created, reverse=True)  # newest first

    pages = [_get(proxy, base, limit=2, offset=o) for o in (0, 2, 4)]
    assert [len(p["data"]) for p in pages] == [2, 2, 1]
    assert [m["id"] for p in pages for m in p["data"]] == [m["id"] for m in everything["data"]]
    assert all(p["total"] == 5 for p in pages)

    assert {m["memory"] for m in _get(proxy, base, user="alice")["data"]} == set(FACTS["alice"])
    assert {m["memory"] for m in _get(proxy, base, user="")["data"]} == set(FACTS[""])
    assert _get(proxy, base, user="nobody")["data"] == []


def test_search_get_and_delete(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = _seed(proxy)
    base = f"/tokens/{token_id}/memories"
    hits = _get(proxy, f"{base}/search", query="what is my favourite fruit", user="alice")["data"]
    assert hits[0]["memory"] == "My favourite fruit is mango" and hits[0]["user"] == "alice"
    assert isinstance(hits[0]["score"], float)
    across = _get(proxy, f"{base}/search", query="my bike", limit=1)["data"]
    assert [(m["user"], m["memory"]) for m in across] == [("bob", "My bike is green")]

    one = _get(proxy, f"{base}/{hits[0]['id']}")
    assert one["memory"] == "My favourite fruit is mango" and one["user"] == "alice"
    assert proxy.admin("DELETE", f"{base}/{hits[0]['id']}").status_code == 204
    assert proxy.admin("GET", f"{base}/{hits[0]['id']}").status_code == 404
    assert proxy.admin("DELETE", f"{base}/{hits[0]['id']}").status_code == 404
    assert proxy.admin("GET", f"{base}/not-a-uuid").status_code == 404
    assert "My favourite fruit is mango" not in memory_texts(proxy, token_id)

    # A deleted memory is no longer recalled.
    assert chat(proxy, token, "what is my favourite fruit", user="alice").status_code == 200
    assert "My favourite fruit is mango" not in memory_block(forwarded_recall(upstream))


def test_delete_all_of_a_namespace_or_of_the_token(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, _ = _seed(proxy)
    base = f"/tokens/{token_id}/memories"
    assert proxy.admin("DELETE", base, params={"user": "alice"}).status_code == 204
    assert memory_texts(proxy, token_id, "alice") == set()
    assert memory_texts(proxy, token_id, "bob") == set(FACTS["bob"])
    assert proxy.admin("DELETE", base, params={"user": ""}).status_code == 204
    assert memory_texts(proxy, token_id) == set(FACTS["bob"])
    assert proxy.admin("DELETE", base).status_code == 204
    assert memory_texts(proxy, token_id) == set()
    # The token still works and remembers again.
    token = proxy.admin("POST", f"/tokens/{token_id}/rotate").json()["token"]
    assert chat(proxy, token, "I moved to Braga").status_code == 200
    wait_until(lambda: memory_texts(proxy, token_id) == {"I moved to Braga"})


def test_unknown_token_layer_off_and_secrets(proxy: Proxy, upstream: FakeUpstream) -> None:
    assert proxy.admin("GET", "/tokens/999/memories").status_code == 404
    assert proxy.admin("DELETE", "/tokens/999/memories").status_code == 404
    off_id, _ = proxy.create_token()
    for method, path in (
        ("GET", f"/tokens/{off_id}/memories"),
        ("GET", f"/tokens/{off_id}/memories/search?query=x"),
        ("DELETE", f"/tokens/{off_id}/memories"),
    ):
        reply = proxy.admin(method, path)
        assert reply.status_code == 409, reply.text
        assert "off" in reply.json()["error"]["message"]

    token_id, _ = proxy.create_token(**memory_fields(proxy.upstream_url))
    upstream.embedding_status = 500
    upstream.embedding_error_body = {"error": {"message": f"key {EMBED_KEY} {MEMORY_LLM_KEY}"}}
    reply = proxy.admin("GET", f"/tokens/{token_id}/memories/search", params={"query": "x"})
    assert reply.status_code == 502
    assert EMBED_KEY not in reply.text and MEMORY_LLM_KEY not in reply.text
    blank = proxy.admin("GET", f"/tokens/{token_id}/memories/search", params={"query": " "})
    assert blank.status_code == 422


def test_misconfigured_provider_is_409_for_admin_and_502_for_chat(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    # Groq takes no base URL in Mem0: valid JSON, but not something Mem0 can be built from.
    fields = memory_fields(proxy.upstream_url, memory_llm_provider="groq")
    # Saved unchecked: checked, it would be refused (test_config_checks.py).
    body = {"name": "t", "llm_base_url": proxy.upstream_url, **fields}
    created = proxy.admin("POST", "/tokens", json=body, params={"validate": "false"}).json()
    token_id, token = created["id"], created["token"]
    layer = proxy.admin("GET", f"/tokens/{token_id}").json()["memory_layers"]["longterm"]
    assert layer.startswith("misconfigured:") and "groq" in layer
    reply = proxy.admin("GET", f"/tokens/{token_id}/memories")
    assert reply.status_code == 409 and "misconfigured" in reply.json()["error"]["message"]
    answer = chat(proxy, token, "hello")
    assert answer.status_code == 502
    assert answer.json()["error"]["type"] == "memory_retrieval_failed"
    assert upstream.proxied_requests == []


def _log(proxy: Proxy, token_id: int) -> list[tuple[str, str, int, dict[str, Any]]]:
    """The token's events of the memory log: (type, aggregate, version, payload), in order."""
    db = sqlite3.connect(proxy.settings.memory_bridge_data_dir / "memory_bridge.db")
    try:
        rows = db.execute(
            "select type, aggregate_id, version, payload from memory_events "
            "where token_id = ? order by id",
            (token_id,),
        ).fetchall()
    finally:
        db.close()
    return [(t, a, v, json.loads(p)) for t, a, v, p in rows]


def test_every_fact_change_is_an_event_of_the_log(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, _ = _seed(proxy)
    # A fact is searchable as soon as Mem0 stored it; its event follows the add.
    count = sum(len(facts) for facts in FACTS.values())
    wait_until(
        lambda: sum(e[0] == "longterm.retained" for e in _log(proxy, token_id)) == count,
        what="the retained events",
    )
    events = _log(proxy, token_id)
    turns = {
        e[3]["messages"][0]["content"]: (e[3]["user"], eid)
        for e, eid in zip(events, _event_ids(proxy, token_id), strict=True)
        if e[0] == "session.appended"
    }
    retained = [e for e in events if e[0] == "longterm.retained"]
    # One event per fact, with its text, its end user and the turn it came from.
    assert sorted((e[3]["user"], e[3]["text"]) for e in retained) == sorted(
        (user, fact) for user, facts in FACTS.items() for fact in facts
    )
    listed = {m["memory"]: m["id"] for m in memories(proxy, token_id)}
    for _, aggregate, version, payload in retained:
        user, source = turns[payload["text"]]
        assert payload == {
            "user": user,
            "memory_id": listed[payload["text"]],
            "text": payload["text"],
            "source_event_id": source,
        }
        assert aggregate == f"{token_id}|{user}|longterm|{payload['memory_id']}"
        assert version == 1

    # An operator's deletes are events too: one memory, then an end user's.
    base = f"/tokens/{token_id}/memories"
    mango = listed["My favourite fruit is mango"]
    assert proxy.admin("DELETE", f"{base}/{mango}").status_code == 204
    assert proxy.admin("DELETE", base, params={"user": "alice"}).status_code == 204
    deleted = [e for e in _log(proxy, token_id) if e[0] == "longterm.deleted"]
    assert [(e[3]["memory_id"], e[3]["user"], e[2]) for e in deleted] == [
        (mango, "alice", 2),
        (listed["My sister is called Maria"], "alice", 2),
    ]
    assert all(e[3]["reason"] == "admin" and "text" not in e[3] for e in deleted)
    everything = json.dumps(_log(proxy, token_id))
    assert MEMORY_LLM_KEY not in everything and EMBED_KEY not in everything


def _event_ids(proxy: Proxy, token_id: int) -> list[str]:
    db = sqlite3.connect(proxy.settings.memory_bridge_data_dir / "memory_bridge.db")
    try:
        rows = db.execute(
            "select event_id from memory_events where token_id = ? order by id", (token_id,)
        ).fetchall()
    finally:
        db.close()
    return [r[0] for r in rows]
