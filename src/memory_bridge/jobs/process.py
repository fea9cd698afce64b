"""`memory-bridge worker`: a process that only drains the job queue, until SIGTERM/SIGINT.

On a stop signal it claims nothing more, lets in-flight jobs finish (up to the drain timeout),
then gives the leases of any it had to cancel back to the queue: nothing is lost.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from memory_bridge.jobs.wiring import create_worker
from memory_bridge.settings import Settings
from memory_bridge.sources.services import open_memory_services

log = logging.getLogger(__name__)


async def run_worker(settings: Settings, ready: asyncio.Event | None = None) -> int:
    """Drain the queue until a stop signal; returns the number of jobs completed."""
    if not settings.resolved_qdrant_url:
        log.warning(
            "no QDRANT_URL: the embedded vector engine belongs to one process, so long-term "
            "memory jobs must be drained by `serve` itself (they fail here if `serve` runs)"
        )
    runtime = await open_memory_services(settings)
    worker = create_worker(runtime)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        worker.start()
        log.info("worker %s draining the job queue", worker.owner)
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("stopping: in-flight jobs finish, the rest go back to the queue")
        await worker.stop(settings.background_drain_timeout)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runtime.close()
    log.info("worker stopped after %d job(s)", worker.completed)
    return worker.completed
