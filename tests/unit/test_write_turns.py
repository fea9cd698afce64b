"""SQLite's writer taken in turns: a request's write before waiting background writes, the
background never starved, and a cancelled waiter never keeps the turn."""

from __future__ import annotations

import asyncio

import pytest

from memory_bridge.storage.db import FAVOUR_LIMIT, WriteTurns, mark_background


async def _waiter(turns: WriteTurns, name: str, order: list[str], *, background: bool) -> None:
    if background:
        mark_background()  # this task only
    await turns.acquire()
    order.append(name)
    turns.release()


async def _queued(
    turns: WriteTurns, *specs: tuple[str, bool], order: list[str]
) -> list[asyncio.Task[None]]:
    tasks = []
    for name, background in specs:
        tasks.append(asyncio.create_task(_waiter(turns, name, order, background=background)))
        await asyncio.sleep(0)  # queued in this order
    return tasks


async def test_a_request_write_goes_before_waiting_background_writes() -> None:
    turns, order = WriteTurns(), []
    await turns.acquire()  # a write under way
    tasks = await _queued(
        turns, ("bg1", True), ("bg2", True), ("req1", False), ("req2", False), order=order
    )
    turns.release()
    await asyncio.gather(*tasks)
    assert order == ["req1", "req2", "bg1", "bg2"]


async def test_the_background_gets_a_turn_after_at_most_favour_limit_requests() -> None:
    turns, order = WriteTurns(), []
    await turns.acquire()
    specs = [("bg", True)] + [(f"req{i}", False) for i in range(FAVOUR_LIMIT + 3)]
    tasks = await _queued(turns, *specs, order=order)
    turns.release()
    await asyncio.gather(*tasks)
    assert order.index("bg") == FAVOUR_LIMIT
    assert len(order) == len(specs)


async def test_a_cancelled_waiter_does_not_keep_the_turn() -> None:
    turns, order = WriteTurns(), []
    await turns.acquire()
    gone, kept = await _queued(turns, ("gone", False), ("kept", True), order=order)
    gone.cancel()
    await asyncio.sleep(0)
    turns.release()
    await asyncio.wait_for(kept, 5)
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert order == ["kept"]
    # Cancelled just as the turn was handed to it: it passes the turn on.
    await turns.acquire()
    late, after = await _queued(turns, ("late", False), ("after", False), order=order)
    turns.release()  # `late` holds the turn now, not yet resumed
    late.cancel()
    await asyncio.wait_for(after, 5)
    assert order[-1] == "after"
    await turns.acquire()  # free again: nothing holds it
    turns.release()
