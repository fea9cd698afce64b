"""Recall from every source at once, and the failure policy, enforced here and only here."""

from __future__ import annotations

import asyncio
import logging
import time

from memory_bridge.core import metrics
from memory_bridge.core.errors import ProxyError
from memory_bridge.core.turn import Turn
from memory_bridge.sources.base import MemorySource, OnRecallFailure, Recall
from memory_bridge.sources.failures import RecallFailed

log = logging.getLogger(__name__)


async def recall_all(sources: tuple[MemorySource, ...], turn: Turn) -> list[Recall]:
    outcomes = await asyncio.gather(
        *(_timed(source, turn) for source in sources), return_exceptions=True
    )
    recalls: list[Recall] = []
    failure: ProxyError | None = None
    for source, outcome in zip(sources, outcomes, strict=True):
        if isinstance(outcome, Recall):
            recalls.append(outcome)
            continue
        if not isinstance(outcome, Exception):
            raise outcome  # CancelledError and friends are not ours to swallow
        error = _apply_policy(source, outcome)
        if error is None:
            recalls.append(Recall(source=source.name, failed=True))
        elif failure is None or error.status < failure.status:
            failure = error
    if failure is not None:
        raise failure
    return recalls


async def _timed(source: MemorySource, turn: Turn) -> Recall:
    started = time.perf_counter()
    try:
        return await source.recall(turn)
    finally:
        metrics.stage(f"recall:{source.name}", time.perf_counter() - started)


def _apply_policy(source: MemorySource, exc: Exception) -> ProxyError | None:
    policy = source.on_recall_failure
    # Only a category or the exception's class: messages from client libraries can quote URLs
    # or keys. The request id is on every log line (logs.py).
    failure = exc.cause if isinstance(exc, RecallFailed) else None
    why = failure.category if failure is not None else type(exc).__name__
    log.warning("recall from %s failed (%s)", source.name, why)
    metrics.layer_error(source.name, why)
    if policy is OnRecallFailure.BEST_EFFORT:
        return None
    if policy is OnRecallFailure.MEMORY_UNAVAILABLE:
        if failure is None:
            return ProxyError(
                502, "memory_retrieval_failed", f"Memory retrieval failed ({source.name})."
            )
        return ProxyError(
            502,
            "memory_retrieval_failed",
            f"Memory retrieval failed ({source.name}: {failure.category}): {failure.hint}.",
            headers=failure.headers(),
        )
    return ProxyError(500, "internal_error", f"Local memory storage failed ({source.name}).")
