"""The MCP endpoint (`/mcp`) through the real proxy, with the official `mcp` client library:
a service token's memory as tools — searched as a chat request would recall it, added so the
next chat request recalls it, deleted from every index — and nobody else's."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from agents import Agent, RunConfig, Runner
from agents.mcp import MCPServerStreamableHttp, MCPServerStreamableHttpParams
from agents.models.openai_provider import OpenAIProvider
from mcp.shared.exceptions import MCPError

from tests.fakes.upstream import FakeUpstream, Scenario, ToolCall
from tests.support.chat_helpers import stored_rows
from tests.support.longterm_support import forwarded_recall, wait_until
from tests.support.mcp_support import (
    MCP_HEADERS,
    TEA,
    call,
    error_text,
    events,
    jobs_done,
    listed_memories,
    mcp_session,
    ok,
    run,
    say,
)
from tests.support.proxy import Proxy
from tests.support.responses_helpers import MODEL

TOOLS = {"search_memory", "add_memory", "list_memories", "delete_memory", "get_profile"}


def test_initialize_with_a_service_token_and_list_the_tools(proxy: Proxy) -> None:
    _, token = proxy.create_token()

    async def work() -> Any:
        async with mcp_session(proxy, token) as session:
            return await session.list_tools()

    listed = run(work)
    tools = {t.name: t for t in listed.tools}
    assert set(tools) == TOOLS
    search = tools["search_memory"].input_schema
    assert search["type"] == "object" and search["required"] == ["query"]
    assert set(search["properties"]) == {"query", "user", "limit"}
    assert search["properties"]["limit"]["maximum"] == 50
    assert tools["add_memory"].input_schema["required"] == ["text"]
    assert set(tools["list_memories"].input_schema["properties"]) == {"user", "limit", "cursor"}
    assert tools["delete_memory"].input_schema["required"] == ["id"]
    assert all(t.description for t in tools.values())


def test_search_finds_what_a_chat_request_would_inject_in_its_order(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = proxy.create_token()
    said = [
        "My sister Ingrid lives in Trondheim",
        "Ingrid works at a kayak shop in Trondheim",
        "I bought a red kayak from Ingrid",
    ]
    for text in said:
        say(proxy, token, text, "monday")
    jobs_done(proxy, token_id, "episodic")
    rows_before, events_before = stored_rows(proxy), events(proxy)

    query = "Where does Ingrid live, in Trondheim?"
    found = ok(
        call(
            proxy,
            token,
            "search_memory",
            {"query": query, "user": "ada"},
            {"X-Session-Id": "friday"},
        )
    )
    # Nothing stored by a search.
    assert stored_rows(proxy) == rows_before and events(proxy) == events_before
    items = found["items"]
    assert found["user"] == "ada" and items
    assert {i["source"] for i in items} == {"episodic"}
    assert all(i["date"] and i["score"] > 0 for i in items)
    # The facts about where Ingrid lives; the kayak stays under the relevance floor.
    assert set(said[:2]) <= {i["text"] for i in items}
    assert said[2] not in {i["text"] for i in items}

    # The chat request of that session, with that query, injects the same items in that order.
    say(proxy, token, query, "friday")
    assert listed_memories(forwarded_recall(upstream)) == [i["text"] for i in items]


def test_added_memory_is_injected_then_deleted_everywhere(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = proxy.create_token()
    other_id, other = proxy.create_token(name="other")
    added = ok(call(proxy, token, "add_memory", {"text": TEA}, {"X-User-Id": "ada"}))
    memory_id = added["id"]
    assert added["layer"] == "episodic" and added["user"] == "ada"
    jobs_done(proxy, token_id, "episodic")

    # The next chat request, in a new session, recalls it; its trace says so.
    raw = proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": "What tea do I like, lapsang?"}],
        user="ada",
        extra_headers={"X-Session-Id": "new-session"},
    )
    assert TEA in listed_memories(forwarded_recall(upstream))
    trace_path = f"/tokens/{token_id}/traces/{raw.headers['x-request-id']}"

    def written() -> str | None:  # traces are written in batches, off the request
        reply = proxy.admin("GET", trace_path)
        return reply.text if reply.status_code == 200 else None

    assert TEA in str(wait_until(written, what="the trace"))
    listed = ok(call(proxy, token, "list_memories", {"user": "ada"}))
    assert [(m["id"], m["text"]) for m in listed["items"]] == [(memory_id, TEA)]
    assert listed["items"][0]["created_at"].endswith("+00:00")  # with its time zone, as admin
    assert listed["next_cursor"] is None

    # Another end user of the token, and another token, see none of it and cannot delete it.
    tea_query = {"query": "favourite tea lapsang souchong"}
    assert ok(call(proxy, token, "search_memory", {**tea_query, "user": "eve"}))["items"] == []
    assert ok(call(proxy, token, "list_memories", {"user": "eve"}))["items"] == []
    assert ok(call(proxy, other, "search_memory", {**tea_query, "user": "ada"}))["items"] == []
    assert ok(call(proxy, other, "list_memories", {"user": "ada"}))["items"] == []
    refused = call(proxy, other, "delete_memory", {"id": memory_id, "user": "ada"})
    assert error_text(refused) == "No memory with that id for this user."
    refused = call(proxy, token, "delete_memory", {"id": memory_id}, {"X-User-Id": "eve"})
    assert error_text(refused) == "No memory with that id for this user."
    hits = ok(call(proxy, token, "search_memory", {**tea_query, "user": "ada"}))["items"]
    assert hits[0]["text"] == TEA  # (the chat above is episodic memory of ada's too)

    deleted = call(proxy, token, "delete_memory", {"id": memory_id, "user": "ada"})
    assert ok(deleted) == {"deleted": memory_id}
    # The chat's own question is still found (episodic memory of ada's); the fact is not.
    asked = {"query": "What tea do I like, lapsang?", "user": "ada"}
    hits = ok(call(proxy, token, "search_memory", asked))["items"]
    assert hits and TEA not in [i["text"] for i in hits]
    assert ok(call(proxy, token, "list_memories", {"user": "ada"}))["items"] == []
    say(proxy, token, "What tea do I like, lapsang?", "third-session")
    assert TEA not in forwarded_recall(upstream)
    # The text left the log and the trace that recalled it; a content-free tombstone stays.
    assert proxy.admin("GET", trace_path).status_code == 404
    types = [t for t, _ in events(proxy)]
    assert "memory.added" not in types and types.count("memory.deleted") == 1
    assert all("souchong" not in payload for _, payload in events(proxy))
    again = call(proxy, token, "delete_memory", {"id": memory_id, "user": "ada"})
    assert error_text(again) == "No memory with that id for this user."
    assert other_id != token_id


def test_every_call_is_audited_and_counted_without_its_text(proxy: Proxy) -> None:
    token_id, token = proxy.create_token()
    ok(call(proxy, token, "add_memory", {"text": TEA, "user": "ada"}))
    error_text(call(proxy, token, "add_memory", {"text": "   "}))
    audit = proxy.admin("GET", f"/tokens/{token_id}/events", params={"type": "mcp_tool_called"})
    entries = [(e["user"], e["data"]) for e in audit.json()["data"]]
    assert entries == [
        ("ada", {"tool": "add_memory", "outcome": "ok"}),
        ("", {"tool": "add_memory", "outcome": "invalid"}),
    ]
    metrics = httpx.get(f"{proxy.url}/metrics", headers=proxy.admin_headers).text
    assert 'memorybridge_mcp_tool_calls_total{outcome="ok",tool="add_memory"}' in metrics
    assert 'memorybridge_mcp_tool_calls_total{outcome="invalid",tool="add_memory"}' in metrics
    assert "lapsang" not in metrics and token not in metrics


def test_list_memories_pages_with_its_cursor(proxy: Proxy) -> None:
    _, token = proxy.create_token()
    facts = [f"Fact number {i} about Ada" for i in range(5)]
    for fact in facts:
        ok(call(proxy, token, "add_memory", {"text": fact, "user": "ada"}))
    seen: list[str] = []
    pages = 0
    cursor: str | None = None
    while pages < len(facts):  # a bound: a cursor that never ends fails, not hangs
        arguments = {"user": "ada", "limit": 2, "cursor": cursor}
        page = ok(call(proxy, token, "list_memories", arguments))
        seen.extend(m["text"] for m in page["items"])
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == facts and pages == 3


def test_the_profile_is_the_curated_documents(proxy: Proxy) -> None:
    token_id, token = proxy.create_token()
    put = proxy.admin("PUT", f"/tokens/{token_id}/curated/memory", content="Be brief.")
    assert put.status_code == 204
    put = proxy.admin(
        "PUT", f"/tokens/{token_id}/curated/user", params={"user": "ada"}, content="Ada, a chemist."
    )
    assert put.status_code == 204
    profile = ok(call(proxy, token, "get_profile", {"user": "ada"}))
    assert profile == {"user": "ada", "memory_md": "Be brief.", "user_md": "Ada, a chemist."}
    assert ok(call(proxy, token, "get_profile", {"user": "eve"}))["user_md"] == ""


def test_a_passthrough_token_has_no_memory_to_serve(proxy: Proxy) -> None:
    token_id, token = proxy.create_token(memory={"mode": "off"})
    before = events(proxy)
    for tool, arguments in (("add_memory", {"text": TEA}), ("search_memory", {"query": "tea"})):
        refused = call(proxy, token, tool, arguments)
        assert error_text(refused) == "This token's memory is off (memory.mode 'off')."
    assert events(proxy) == before
    assert token_id


@pytest.mark.parametrize("who", ["admin", "wrong"])
def test_the_admin_token_and_a_wrong_token_are_refused_before_any_message(
    proxy: Proxy, who: str
) -> None:
    secret = proxy.admin_token if who == "admin" else "mb-not-a-token"
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    reply = httpx.post(
        f"{proxy.url}/mcp",
        json=initialize,
        headers={"Authorization": f"Bearer {secret}", **MCP_HEADERS},
        timeout=30,
    )
    assert reply.status_code == (403 if who == "admin" else 401)
    assert reply.json()["error"]["type"] in {"permission_error", "authentication_error"}
    # The official client fails at `initialize`: no session with such a token.
    with pytest.raises(BaseExceptionGroup) as raised:
        run(lambda: _initialize(proxy, secret))
    assert any(isinstance(e, MCPError) for e in _leaves(raised.value))


async def _initialize(proxy: Proxy, secret: str) -> None:
    async with mcp_session(proxy, secret):
        pass


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def test_a_malformed_message_is_a_clear_error_and_stores_nothing(proxy: Proxy) -> None:
    token_id, token = proxy.create_token()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    before = events(proxy)
    reply = httpx.post(
        f"{proxy.url}/mcp",
        content=b'{"jsonrpc": "2.0", "id": 1, "method": ',
        headers={**headers, **MCP_HEADERS},
        timeout=30,
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["message"].startswith("Parse error")
    not_rpc = httpx.post(
        f"{proxy.url}/mcp", json={"add_memory": TEA}, headers={**headers, **MCP_HEADERS}, timeout=30
    )
    assert not_rpc.status_code == 400 and "Traceback" not in not_rpc.text
    # Well-formed, with arguments that break the schema: a tool error naming the field.
    bad = call(proxy, token, "add_memory", {"text": TEA, "colour": "red"})
    assert "colour" in error_text(bad) and "Traceback" not in error_text(bad)
    bad = call(proxy, token, "add_memory", {"text": 42})
    assert error_text(bad).startswith("Invalid arguments for add_memory: text:")
    assert events(proxy) == before
    assert json.dumps(proxy.admin("GET", f"/tokens/{token_id}/jobs").json()).count("done") == 0


def test_an_agents_sdk_run_calls_add_memory_through_the_proxy(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    """The OpenAI Agents SDK, its model and its MCP server both pointed at the proxy: the
    (fake) model calls `add_memory`, the SDK runs it over MCP, the model answers."""
    token_id, token = proxy.create_token()
    fact = "Ada takes her tea without sugar"
    upstream.enqueue(
        Scenario(tool_calls=[ToolCall("add_memory", {"text": fact}, id="call_m")]),
        Scenario(content="I will remember that."),
    )

    async def work() -> Any:
        client = openai.AsyncOpenAI(
            base_url=f"{proxy.url}/v1",
            api_key=token,
            max_retries=0,
            default_headers={"X-Session-Id": "agent", "X-User-Id": "ada"},
        )
        config = RunConfig(
            model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True
        )
        params: MCPServerStreamableHttpParams = {
            "url": f"{proxy.url}/mcp",
            "headers": {"Authorization": f"Bearer {token}", "X-User-Id": "ada"},
            "timeout": 30,
        }
        async with MCPServerStreamableHttp(params, client_session_timeout_seconds=30) as server:
            agent = Agent(
                name="memory", instructions="Remember facts.", model=MODEL, mcp_servers=[server]
            )
            return await Runner.run(agent, "Remember: no sugar in my tea.", run_config=config)

    result = run(work)
    assert result.final_output == "I will remember that."
    first, second = (r.json for r in upstream.responses_requests)
    assert "add_memory" in {t["name"] for t in first["tools"]}
    output = next(i for i in second["input"] if i.get("type") == "function_call_output")
    assert output["call_id"] == "call_m"
    # The SDK hands the tool's text content back to the model as it came.
    (text,) = [part["text"] for part in output["output"] if part["type"] == "input_text"]
    added = json.loads(text)
    assert added["user"] == "ada" and added["layer"] == "episodic"
    listed = ok(call(proxy, token, "list_memories", {"user": "ada"}))
    assert [(m["id"], m["text"]) for m in listed["items"]] == [(added["id"], fact)]
    assert token_id
