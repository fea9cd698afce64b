"""Helpers of the MCP endpoint's tests: the official `mcp` client against the real proxy."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx2
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.support.chat_helpers import say as say
from tests.support.hybrid_memory_support import db_rows
from tests.support.longterm_support import memory_block, wait_until
from tests.support.proxy import Proxy

T = TypeVar("T")
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
TEA = "Ada's favourite tea is lapsang souchong"


def events(proxy: Proxy) -> list[tuple[Any, ...]]:
    """Every event of the log: (type, payload JSON), in order."""
    return db_rows(proxy, "select type, payload from memory_events order by id")


@asynccontextmanager
async def mcp_session(
    proxy: Proxy, token: str, headers: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session on the proxy's `/mcp`, as `token`."""
    sent = {"Authorization": f"Bearer {token}", **(headers or {})}
    async with (
        httpx2.AsyncClient(headers=sent, timeout=30) as http,
        streamable_http_client(f"{proxy.url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def run(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(work())


def call(
    proxy: Proxy,
    token: str,
    tool: str,
    arguments: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> types.CallToolResult:
    """One tool call in a session of its own."""

    async def work() -> types.CallToolResult:
        async with mcp_session(proxy, token, headers) as session:
            return await session.call_tool(tool, arguments)

    return run(work)


def ok(result: types.CallToolResult) -> dict[str, Any]:
    """A successful call's structured result (the same JSON as its text content)."""
    text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
    assert not result.is_error, text
    data: dict[str, Any] = result.structured_content
    assert json.loads(text) == data
    return data


def error_text(result: types.CallToolResult) -> str:
    assert result.is_error
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def jobs_done(proxy: Proxy, token_id: int, consumer: str) -> None:
    def done() -> bool:
        summary = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()
        counts = summary["consumers"].get(consumer, {})
        return bool(counts) and set(counts) == {"done"}

    wait_until(done, what=f"the {consumer} jobs")


def listed_memories(block: str) -> list[str]:
    """The items of a forwarded recall block, in their order, without their date labels."""
    return memory_block(block)
