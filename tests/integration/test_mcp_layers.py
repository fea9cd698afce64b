"""The MCP endpoint with the proxy's other layers: long-term memory (Mem0) keeping an added
fact as said, an episodic rebuild from the log, and the edge's body bounds on `/mcp`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import closed_port_url
from tests.support.longterm_support import (
    EMBED_KEY,
    MEMORY_LLM_KEY,
    forwarded_recall,
    memory_fields,
    wait_until,
    with_rid,
)
from tests.support.mcp_support import (
    MCP_HEADERS,
    TEA,
    call,
    error_text,
    events,
    jobs_done,
    listed_memories,
    ok,
    say,
)
from tests.support.proxy import UPSTREAM_KEY, Proxy, start_proxy


def test_with_long_term_memory_a_fact_is_kept_as_said_and_deleted_by_either_id(
    mem0_proxy: Proxy, upstream: FakeUpstream
) -> None:
    proxy = mem0_proxy
    # The chats' own extraction keeps nothing: every fact here is one added through MCP.
    upstream.memory_responder = lambda _: Scenario(content=json.dumps({"memory": []}))
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    user = {"X-User-Id": "ada"}
    added = ok(call(proxy, token, "add_memory", {"text": TEA}, user))
    assert added["layer"] == "longterm"
    jobs_done(proxy, token_id, "longterm")
    assert upstream.memory_requests == []  # stored as said: no extraction call

    listed = ok(call(proxy, token, "list_memories", {}, user))["items"]
    assert [(m["text"], m["added_id"], m["layer"]) for m in listed] == [
        (TEA, added["id"], "longterm")
    ]
    hits = ok(call(proxy, token, "search_memory", {"query": "favourite tea?"}, user))["items"]
    assert [(i["source"], i["text"]) for i in hits] == [("longterm", TEA)]
    say(proxy, token, "What is my favourite tea?", "s1")
    assert listed_memories(forwarded_recall(upstream)) == [TEA]

    # Deleted by the id add_memory gave: gone from Mem0 too.
    assert ok(call(proxy, token, "delete_memory", {"id": added["id"]}, user))
    assert ok(call(proxy, token, "list_memories", {}, user))["items"] == []
    # Another fact deleted by the fact's own id, as list_memories shows it; not by another user.
    second = ok(call(proxy, token, "add_memory", {"text": "Ada sails on Sundays"}, user))
    jobs_done(proxy, token_id, "longterm")
    (fact,) = ok(call(proxy, token, "list_memories", {}, user))["items"]
    assert fact["added_id"] == second["id"] and fact["id"] != second["id"]
    refused = call(proxy, token, "delete_memory", {"id": fact["id"], "user": "eve"})
    assert error_text(refused) == "No memory with that id for this user."
    assert ok(call(proxy, token, "delete_memory", {"id": fact["id"]}, user))
    assert ok(call(proxy, token, "list_memories", {}, user))["items"] == []
    say(proxy, token, "When do I sail, and what tea?", "s2")
    assert forwarded_recall(upstream) == ""


LIMIT = 64 * 1024


@pytest.mark.parametrize("declared", [True, False])
def test_an_mcp_body_is_bounded_as_on_chat(
    tmp_path: Path, upstream_server: tuple[FakeUpstream, str], declared: bool
) -> None:
    server, proxy = start_proxy(tmp_path / "data", upstream_server[1], max_request_bytes=LIMIT)
    try:
        _, token = proxy.create_token()
        before = events(proxy)
        arguments = json.dumps({"text": "x" * LIMIT})
        body = (
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
            f'"params": {{"name": "add_memory", "arguments": {arguments}}}}}'
        ).encode()
        content: bytes | Iterator[bytes] = body
        if not declared:  # chunked: refused as it arrives, past the limit
            content = iter([body[i : i + 4096] for i in range(0, len(body), 4096)])
        reply = httpx.post(
            f"{proxy.url}/mcp",
            content=content,
            headers={
                "Authorization": f"Bearer {token}",
                **MCP_HEADERS,
                "Content-Type": "application/json",
            },
            timeout=30,
        )
        assert reply.status_code == 413, reply.text
        # The edge's refusal, as on chat (not the SDK's own), before any MCP message is read.
        error = reply.json()["error"]
        assert error["type"] == "invalid_request_error" and str(LIMIT) in error["message"]
        assert events(proxy) == before
    finally:
        server.stop()


def test_a_rebuild_from_the_log_keeps_added_facts_and_not_deleted_ones(
    tmp_path: Path, upstream_server: tuple[FakeUpstream, str]
) -> None:
    # A short token cache: the rebuild drops the old shard one cache period after its switch.
    server, proxy = start_proxy(tmp_path / "data", upstream_server[1], token_cache_ttl=0.2)
    try:
        token_id, token = proxy.create_token()
        user = {"X-User-Id": "ada"}
        kept = ok(call(proxy, token, "add_memory", {"text": TEA}, user))
        gone = ok(call(proxy, token, "add_memory", {"text": "Ada's tea kettle is green"}, user))
        jobs_done(proxy, token_id, "episodic")
        ok(call(proxy, token, "delete_memory", {"id": gone["id"]}, user))

        started = proxy.admin("POST", f"/tokens/{token_id}/rebuild?layer=episodic")
        assert started.status_code == 202, started.text

        def idle() -> bool:
            layers = proxy.admin("GET", f"/tokens/{token_id}/rebuild").json()["layers"]
            state: dict[str, Any] = layers.get("episodic", {})
            model = str(state.get("active", {}).get("model", ""))
            return state.get("state") == "idle" and model.endswith("@g1")

        wait_until(idle, what="the rebuild")
        hits = ok(call(proxy, token, "search_memory", {"query": "Ada's tea kettle"}, user))
        assert [i["text"] for i in hits["items"]] == [TEA]
        assert kept["id"] != gone["id"]
    finally:
        server.stop()


def test_a_failing_layer_is_a_clear_tool_error_without_a_secret(
    mem0_proxy: Proxy, upstream: FakeUpstream, logs: pytest.LogCaptureFixture
) -> None:
    proxy = mem0_proxy
    with_rid(logs)
    body = {
        "name": "broken",
        "llm_base_url": proxy.upstream_url,
        "llm_api_key": UPSTREAM_KEY,
        **memory_fields(proxy.upstream_url, embed_base_url=closed_port_url()),
    }
    created = proxy.admin("POST", "/tokens?validate=false", json=body)  # saved unchecked
    assert created.status_code == 201, created.text
    token_id, token = created.json()["id"], created.json()["token"]
    failed = call(proxy, token, "search_memory", {"query": "tea?"}, {"X-User-Id": "ada"})
    text = error_text(failed)
    assert text.startswith("Memory retrieval failed (longterm: embedder_unreachable)")
    for secret in (EMBED_KEY, MEMORY_LLM_KEY, UPSTREAM_KEY, token, closed_port_url()[:16]):
        assert secret not in text
    audit = proxy.admin("GET", f"/tokens/{token_id}/events", params={"type": "mcp_tool_called"})
    (entry,) = audit.json()["data"]
    assert entry["data"] == {"tool": "search_memory", "outcome": "failed"}
    # The server's log line of the failure carries the request's id, and no secret.
    (line,) = [r for r in logs.records if "long-term memory search failed" in r.getMessage()]
    assert getattr(line, "rid", None) == entry["request_id"]
    assert all(s not in line.getMessage() for s in (EMBED_KEY, MEMORY_LLM_KEY, UPSTREAM_KEY))
