"""Export and import through the real proxy, on SQLite and PostgreSQL: opt-in classes, masking,
no secret in an export, audit, all-or-nothing and idempotent imports, and a round trip A ->
export -> import into B that gives B the same recall for the same question."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario, extract_user_facts
from tests.support.longterm_support import (
    EMBED_KEY,
    MEMORY_LLM_KEY,
    forwarded_recall,
    memories,
    memory_block,
    memory_fields,
    wait_for_memory,
    wait_until,
)
from tests.support.proxy import UPSTREAM_KEY, Proxy, start_proxy

NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
def served(
    tmp_path: Path, database_url: str, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Proxy]:
    server, proxy = start_proxy(tmp_path / "data", upstream_server[1], database_url=database_url)
    try:
        yield proxy
    finally:
        server.stop()


def _no_facts(_: list[str]) -> Scenario:
    return Scenario(content=json.dumps({"memory": []}))


def _kayak_fact(texts: list[str]) -> Scenario:
    """One long-term fact, from one turn only (the rest of the test is about episodic)."""
    return extract_user_facts([t for t in texts if "kayak" in t])


def _say(proxy: Proxy, token: str, text: str, session: str, user: str = "ada") -> Any:
    return proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user=user,
        extra_headers={"X-Session-Id": session},
    )


def _indexed(proxy: Proxy, token_id: int) -> Callable[[], bool]:
    def done() -> bool:
        counts = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"]
        episodic = counts.get("episodic", {})
        return bool(episodic) and set(episodic) == {"done"}

    return done


def _export(proxy: Proxy, token_id: int, **params: Any) -> tuple[str, list[dict[str, Any]]]:
    reply = proxy.admin("GET", f"/tokens/{token_id}/export", params=params)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in reply.text.splitlines()]
    assert lines[0]["format"] == "memory-bridge.export" and lines[0]["version"] == 1
    assert lines[0]["events"] == len(lines) - 1
    return reply.text, lines


def _import(proxy: Proxy, token_id: int, body: str) -> httpx.Response:
    return httpx.post(
        f"{proxy.url}/v1/admin/tokens/{token_id}/import",
        content=body.encode(),
        headers={**proxy.admin_headers, **NDJSON},
        timeout=60,
    )


def test_export_then_import_gives_the_same_recall(
    served: Proxy, upstream: FakeUpstream, database_url: str
) -> None:
    proxy = served
    upstream.memory_responder = _kayak_fact
    fields = memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    a_id, a = proxy.create_token(name="a", **fields)
    b_id, b = proxy.create_token(name="b", **fields)
    c_id, _ = proxy.create_token(name="c", **fields)
    curated = "# Facts\nThe team ships on Thursdays."
    assert proxy.admin("PUT", f"/tokens/{a_id}/curated/memory", content=curated.encode()).is_success
    _say(proxy, a, "My sister Ingrid lives in Trondheim", "monday")
    _say(proxy, a, "I bought a red kayak", "monday")
    _say(proxy, a, "Write to me at ada.lovelace@example.com", "tuesday")
    _say(proxy, a, "I like chess", "monday", user="bob")
    wait_until(_indexed(proxy, a_id), what="A's episodic jobs")
    wait_for_memory(proxy, a_id, "I bought a red kayak", "ada")
    upstream.memory_responder = _no_facts

    # Classes are opt-in: no include, the header alone (saying what there would be).
    _, header_only = _export(proxy, a_id)
    assert len(header_only) == 1
    assert header_only[0]["available"]["sessions"] == 7  # 3 started, 4 appended
    assert header_only[0]["available"]["curated"] == 1
    _, curated_only = _export(proxy, a_id, include="curated")
    assert {e["type"] for e in curated_only[1:]} == {"curated.replaced"}

    text, full = _export(proxy, a_id, include="sessions,curated,longterm")
    assert "Trondheim" in text and "Thursdays" in text
    # No secret of any token config, no token secret, in an export.
    for secret in (UPSTREAM_KEY, MEMORY_LLM_KEY, EMBED_KEY, a, proxy.admin_token):
        assert secret not in text
    masked, _ = _export(proxy, a_id, include="sessions", mask="true")
    assert "ada.lovelace@example.com" not in masked and "[email]" in masked
    assert "Trondheim" in masked

    audit = proxy.admin("GET", f"/tokens/{a_id}/events", params={"type": "export"}).json()
    left = [(e["data"]["classes"], e["data"]["masked"]) for e in audit["data"]]
    assert left == [
        ([], False),
        (["curated"], False),
        (["curated", "longterm", "sessions"], False),
        (["sessions"], True),
    ]

    # A bad line refuses the whole import, naming it; nothing of it is applied.
    bad = "\n".join([*text.splitlines()[:3], '{"type": "session.appended"}']) + "\n"
    refused = _import(proxy, c_id, bad)
    assert refused.status_code == 422 and "Line 4" in refused.json()["error"]["message"]
    assert _export(proxy, c_id, include="sessions,curated")[1][0]["events"] == 0

    # Into B, twice: the second changes nothing.
    first = _import(proxy, b_id, text)
    assert first.status_code == 200, first.text
    events = len(full) - 1
    turns = sum(1 for e in full[1:] if e["type"] == "session.appended")
    assert first.json()["imported"] == events and first.json()["skipped"] == 0
    assert first.json()["jobs"] == {"episodic": turns}
    assert first.json()["counts"]["longterm.retained"] == 1
    again = _import(proxy, b_id, text).json()
    assert (again["imported"], again["skipped"]) == (0, events)
    # Importing A's export back into A brings nothing twice either.
    assert _import(proxy, a_id, text).json()["imported"] == 0

    sessions_a = proxy.admin("GET", f"/tokens/{a_id}/sessions").json()["data"]
    sessions_b = proxy.admin("GET", f"/tokens/{b_id}/sessions").json()["data"]
    assert sessions_a == sessions_b and len(sessions_a) == 3
    assert proxy.admin("GET", f"/tokens/{b_id}/curated/memory").text == curated
    wait_until(_indexed(proxy, b_id), what="B's episodic jobs")
    # A's long-term fact reaches B's Mem0 store by the long-term rebuild (no LLM call), under
    # an id of B's own.
    wait_for_memory(proxy, b_id, "I bought a red kayak", "ada")
    (fact_a,) = memories(proxy, a_id, "ada")
    (fact_b,) = memories(proxy, b_id, "ada")
    assert fact_b["id"] != fact_a["id"]

    # The same question on A and on B: the same memory reaches the upstream. (Episodic points
    # take their recency from when they were indexed, so items of equal relevance may trade
    # places: the items are compared as a set, the best one by its place.)
    seen = {}
    for token in (a, b):
        raw = _say(proxy, token, "Where does Ingrid live?", "friday")
        forwarded = upstream.proxied_requests[-1].json["messages"]
        items = memory_block(forwarded_recall(upstream))
        system = [m for m in forwarded if m["role"] == "system"]
        seen[token] = (raw.headers["x-memorybridge-injected"], items, system)
    assert seen[a][1][0] == seen[b][1][0] == "My sister Ingrid lives in Trondheim"
    # The fact and the reply of its exchange; the unrelated turns stay under the relevance floor.
    assert sorted(seen[a][1]) == sorted(seen[b][1]) and len(seen[a][1]) == 2
    assert seen[a][0] == seen[b][0] and seen[a][2] == seen[b][2]
    assert "Thursdays" in json.dumps(seen[b][2])
    assert b_id != a_id and database_url


def test_an_import_has_its_own_size_limit(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    server, proxy = start_proxy(
        tmp_path / "data", upstream_server[1], max_request_bytes=20_000, max_import_bytes=100_000
    )
    try:
        token_id, _ = proxy.create_token()
        header = {"format": "memory-bridge.export", "version": 1}
        doc = "# Facts\n" + "The sky is blue. " * 3000  # 51 kB: over the request limit
        event = {
            "event_id": "e1",
            "type": "curated.replaced",
            "payload": {"kind": "memory", "user": "", "body": doc},
            "created_at": "2026-01-02T03:04:05+00:00",
        }
        body = json.dumps(header) + "\n" + json.dumps(event) + "\n"
        put = proxy.admin("PUT", f"/tokens/{token_id}/curated/memory", content=doc.encode())
        assert put.status_code == 413  # the ordinary admin limit
        assert _import(proxy, token_id, body).json()["imported"] == 1
        assert proxy.admin("GET", f"/tokens/{token_id}/curated/memory").text == doc

        event2 = {**event, "event_id": "e2", "payload": {**event["payload"], "body": doc * 2}}
        twice = body + json.dumps(event2) + "\n"  # 150 kB: over the import limit
        refused = _import(proxy, token_id, twice)
        assert refused.status_code == 413
        assert proxy.admin("GET", f"/tokens/{token_id}/curated/memory").text == doc
        staging = proxy.settings.memory_bridge_data_dir / "imports"
        assert not any(staging.iterdir())
    finally:
        server.stop()


def test_an_import_obeys_the_bounds_of_the_api(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    """A curated document the admin PUT refuses (over CURATED_MAX_BYTES) is refused by an
    import too, and changes nothing; a message over MAX_STORED_MESSAGE_BYTES is stored cut,
    with the chat path's marker, as a chat turn's would be, and is injected only so."""
    server, proxy = start_proxy(
        tmp_path / "data", upstream_server[1], curated_max_bytes=1000, max_stored_message_bytes=2000
    )
    try:
        token_id, token = proxy.create_token()
        header = json.dumps({"format": "memory-bridge.export", "version": 1}) + "\n"
        doc = "# Facts\n" + "The sky is blue. " * 100  # 1.7 kB
        put = proxy.admin("PUT", f"/tokens/{token_id}/curated/memory", content=doc.encode())
        assert put.status_code == 413
        event = {
            "event_id": "e1",
            "type": "curated.replaced",
            "payload": {"kind": "memory", "user": "", "body": doc},
            "created_at": "2026-01-02T03:04:05+00:00",
        }
        refused = _import(proxy, token_id, header + json.dumps(event) + "\n")
        assert refused.status_code == 413, refused.text
        assert "Line 2" in refused.json()["error"]["message"]
        assert proxy.admin("GET", f"/tokens/{token_id}/curated/memory").text == ""
        assert not any((proxy.settings.memory_bridge_data_dir / "imports").iterdir())

        huge = "word " * 200_000  # 1 MB
        turn = {
            "event_id": "e2",
            "type": "session.appended",
            "payload": {
                "user": "ada",
                "session": "s",
                "messages": [{"role": "user", "content": huge}],
                "query": huge,
                "finish_reason": "stop",
            },
            "created_at": "2026-01-02T03:04:05+00:00",
        }
        done = _import(proxy, token_id, header + json.dumps(turn) + "\n")
        assert done.status_code == 200, done.text
        history = proxy.admin(
            "GET", f"/tokens/{token_id}/sessions/messages", params={"session": "s", "user": "ada"}
        ).json()["data"]
        (stored,) = [h["message"]["content"] for h in history]
        assert "[truncated by MemoryBridge: 2000 of 1000000 bytes kept" in stored
        assert len(stored.encode()) < 2200
        proxy.client(token).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "next"}],
            user="ada",
            extra_headers={"X-Session-Id": "s"},
        )
        sent = json.dumps(upstream.proxied_requests[-1].json)
        assert len(sent) < 10_000 and "truncated by MemoryBridge" in sent
    finally:
        server.stop()
