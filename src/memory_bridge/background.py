"""In-process background work: memory writes that must never hold a client's connection.

Tasks are strongly referenced until done (an unreferenced asyncio task can be collected
mid-flight), bounded in concurrency, each under its own timeout, and drained at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from typing import Any

from memory_bridge.tenancy.secrets import scrub

log = logging.getLogger(__name__)


class BackgroundWork:
    def __init__(self, max_concurrency: int = 8) -> None:
        self._slots = asyncio.Semaphore(max_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def submit(
        self,
        name: str,
        work: Coroutine[Any, Any, None],
        *,
        timeout: float,
        secrets: Iterable[str] = (),
    ) -> None:
        task = asyncio.create_task(self._run(name, work, timeout, tuple(secrets)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(
        self, name: str, work: Coroutine[Any, Any, None], timeout: float, secrets: tuple[str, ...]
    ) -> None:
        try:
            async with self._slots:
                await asyncio.wait_for(work, timeout)
        except TimeoutError:
            log.error("background %s timed out after %.0fs", name, timeout)
        except Exception as exc:
            log.error("background %s failed: %s: %s", name, type(exc).__name__, scrub(exc, secrets))
        finally:
            work.close()  # no-op when it ran; silences "never awaited" when it did not

    async def drain(self, timeout: float) -> None:
        """Let queued work finish; whatever is still running after `timeout` is cancelled."""
        if not self._tasks:
            return
        log.info("draining %d background task(s)", len(self._tasks))
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("cancelled %d background task(s) at shutdown", len(pending))
            await asyncio.gather(*pending, return_exceptions=True)
