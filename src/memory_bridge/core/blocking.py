"""A bounded thread pool for blocking library calls (Mem0, Qdrant local mode, torch).

At most `threads` calls run at once and nothing queues behind them: a caller first takes one
of `threads` slots, and the slot is given back only when the thread has really finished — not
when the caller stopped waiting. A call that times out keeps its slot until its thread returns,
so work that keeps timing out can never pile up threads or an unbounded queue; new callers wait
for a slot (under their own timeout) instead.

Each call runs in a copy of the caller's context, so log records emitted inside the thread
carry the request id (`rid=`) of the request that caused them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class BlockingExecutor:
    def __init__(self, threads: int, name: str = "memory") -> None:
        self._threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
        self._slots: asyncio.Semaphore | None = None
        self._busy = 0
        self._closed = False

    @property
    def busy(self) -> int:
        """Calls whose thread has not finished yet (including abandoned ones)."""
        return self._busy

    def _semaphore(self) -> asyncio.Semaphore:
        # Created on first use, inside the running loop that will use it.
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._threads)
        return self._slots

    async def run(self, fn: Callable[[], T], on_finish: Callable[[], None] | None = None) -> T:
        """Run `fn` in a thread. `on_finish` is called on the loop once the thread is done
        (or at once if `fn` never started), however the caller's wait ended."""
        if self._closed:
            if on_finish is not None:
                on_finish()
            raise RuntimeError("the memory thread pool is shut down")
        slots = self._semaphore()
        try:
            await slots.acquire()
        except BaseException:
            if on_finish is not None:
                on_finish()
            raise
        loop = asyncio.get_running_loop()
        self._busy += 1

        def release() -> None:
            self._busy -= 1
            slots.release()
            if on_finish is not None:
                on_finish()

        def finished(_: Future[T]) -> None:
            # A closed loop (shutdown) has nobody left to count slots for.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(release)

        try:
            future = self._pool.submit(contextvars.copy_context().run, fn)
        except BaseException:
            release()
            raise
        future.add_done_callback(finished)
        return await asyncio.wrap_future(future)

    def submit_detached(self, fn: Callable[[], None]) -> None:
        """Fire-and-forget housekeeping (closing a retired instance); not slot-bounded."""
        if self._closed:
            fn()
            return
        self._pool.submit(contextvars.copy_context().run, fn)

    async def shutdown(self, timeout: float) -> None:
        """Stop taking work; wait up to `timeout` for running threads, then leave them."""
        self._closed = True
        waiter = asyncio.get_running_loop().run_in_executor(
            None, lambda: self._pool.shutdown(wait=True)
        )
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            log.warning("%d memory call(s) still running at shutdown; not waiting", self._busy)
