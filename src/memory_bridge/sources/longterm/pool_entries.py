"""The pool's record of one token's Mem0 instance, and which records go when the pool is full."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

__all__ = ["Entry", "failed_or_pending", "victims"]


@dataclass(eq=False)
class Entry:
    fingerprint: str
    ready: asyncio.Future[Any]  # the Mem0 `Memory` instance
    users: int = 0  # calls holding it (until their thread has finished)
    retired: bool = False
    closed: bool = False
    writes: int = 0


def victims(entries: OrderedDict[int, Entry], limit: int) -> list[tuple[int, Entry]]:
    """The entries to drop so that at most `limit` stay (0: no bound), least recently used
    first (`entries` is in that order), idle ones before busy ones; never the newest (last),
    which is the one that made room necessary."""
    excess = len(entries) - limit
    if limit == 0 or excess <= 0:
        return []
    older = list(entries.items())[:-1]
    idle = [item for item in older if item[1].users == 0]
    # Every older one busy: the least recently used anyway (closed once its calls end).
    busy = [item for item in older if item[1].users != 0]
    return (idle + busy)[:excess]


def failed_or_pending(ready: asyncio.Future[Any]) -> bool:
    return not ready.done() or ready.cancelled() or ready.exception() is not None
