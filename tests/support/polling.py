"""Waiting for background work in tests: poll a check until it holds.

The bound only keeps a broken build from hanging the suite; nothing is timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

WAIT = 120.0  # upper bound for background work to land; never a measured duration


def wait_until(
    check: Callable[[], T | None], what: str = "condition", *, timeout: float = WAIT
) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` if it never does."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)
