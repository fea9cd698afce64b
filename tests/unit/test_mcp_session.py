"""The MCP endpoint's session manager starts once, on first need (the warm-up or a request),
and stops with the app (http/mcp_session.py), on the real SDK."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from memory_bridge.http.mcp_session import McpSession, SessionManager
from memory_bridge.server.app import _load_mcp


def _counting() -> tuple[list[int], Callable[[], Callable[[], SessionManager]]]:
    loads: list[int] = []

    def load() -> Callable[[], SessionManager]:
        loads.append(1)
        return _load_mcp()

    return loads, load


async def test_concurrent_first_uses_start_one_manager_and_close_stops_it() -> None:
    loads, load = _counting()
    session = McpSession(load)
    assert not session.started
    first, second = await asyncio.gather(session.start(), session.start())
    assert first is second and session.started
    assert len(loads) == 1
    assert await session.start() is first
    await session.close()
    with pytest.raises(RuntimeError, match="closed"):
        await session.start()
    assert len(loads) == 1


async def test_closing_a_session_never_started_loads_nothing() -> None:
    loads, load = _counting()
    session = McpSession(load)
    await session.close()
    assert loads == [] and not session.started


async def test_a_failed_start_is_raised_to_the_caller_and_close_still_works() -> None:
    class Refusing:
        def run(self) -> object:
            raise OSError("no task group today")

    session = McpSession(lambda: Refusing)  # type: ignore[arg-type, return-value]
    with pytest.raises(OSError, match="no task group"):
        await session.start()
    assert not session.started
    await session.close()
