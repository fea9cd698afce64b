"""The bounded thread pool for blocking memory calls."""

from __future__ import annotations

import asyncio
import threading

import pytest

from memory_bridge.core.blocking import BlockingExecutor
from memory_bridge.core.request_context import request_id_var


async def test_runs_in_a_thread_with_the_callers_context() -> None:
    executor = BlockingExecutor(2)
    token = request_id_var.set("abcd1234")
    try:
        seen = await executor.run(lambda: (request_id_var.get(), threading.current_thread().name))
    finally:
        request_id_var.reset(token)
    assert seen[0] == "abcd1234" and seen[1].startswith("memory")
    with pytest.raises(ZeroDivisionError):
        await executor.run(lambda: 1 // 0)
    assert executor.busy == 0
    await executor.shutdown(5)


async def test_a_timed_out_call_keeps_its_slot_until_its_thread_ends() -> None:
    executor = BlockingExecutor(2)
    gate = threading.Event()
    finished: list[str] = []

    def blocked() -> str:
        gate.wait(10)
        return "done"

    # Two callers give up; their threads go on and keep both slots.
    for name in ("a", "b"):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(
                executor.run(blocked, on_finish=lambda name=name: finished.append(name)), 0.05
            )
    assert executor.busy == 2 and finished == []
    # A third caller cannot start anything (no thread, no queue) and times out waiting.
    ran = threading.Event()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(executor.run(ran.set, on_finish=lambda: finished.append("c")), 0.05)
    assert not ran.is_set() and finished == ["c"] and executor.busy == 2

    gate.set()
    for _ in range(200):
        if executor.busy == 0:
            break
        await asyncio.sleep(0.01)
    assert executor.busy == 0 and sorted(finished) == ["a", "b", "c"]
    assert await executor.run(lambda: "free again") == "free again"
    await executor.shutdown(5)
    with pytest.raises(RuntimeError):
        await executor.run(lambda: None)
    closed: list[int] = []
    executor.submit_detached(lambda: closed.append(1))  # after shutdown: runs inline
    assert closed == [1]


async def test_shutdown_does_not_wait_forever_for_a_stuck_thread() -> None:
    executor = BlockingExecutor(1)
    gate = threading.Event()
    task = asyncio.ensure_future(executor.run(lambda: gate.wait(10)))
    await asyncio.sleep(0.05)
    await executor.shutdown(0.05)  # returns although the thread is still blocked
    gate.set()
    assert await task is True
