"""Whether the database takes writes: a turn that cannot be stored is never silent.

A failed turn write marks the storage failing (and counts it); `/health` reports it until a
write succeeds again. The client is told on the response itself (`X-MemoryBridge-Stored`).
"""

from __future__ import annotations

import logging

from prometheus_client import Counter

log = logging.getLogger(__name__)

TURNS_NOT_STORED = Counter(
    "memorybridge_turns_not_stored",
    "Completed turns the database refused to store (the client was told).",
)


class StorageHealth:
    def __init__(self) -> None:
        self.failing = False
        self.last_error: str | None = None  # an exception class name, nothing more

    def write_failed(self, exc: BaseException) -> None:
        TURNS_NOT_STORED.inc()
        if not self.failing:
            log.error("storage is failing: a turn could not be stored (%s)", type(exc).__name__)
        self.failing = True
        self.last_error = type(exc).__name__

    def write_succeeded(self) -> None:
        if self.failing:
            log.warning("storage recovered: turns are stored again")
        self.failing = False
        self.last_error = None
