"""Per-token limits (a token config's `limits`): concurrent requests, requests and tokens per
minute, checked at the edge right after authentication, before the body is read or any memory
is recalled, and answered 429 in the OpenAI error shape with `Retry-After`.

Everything is held in this process (a limit applies per serving process): a sliding minute of
one-second buckets per token, so the state of a token is bounded (60 buckets) whatever its
traffic. Tokens per minute counts the request's input, estimated at 4 bytes a token of its
body: charged from `Content-Length` when the request is admitted (every SDK sends it), or
from the bytes read when the body came without one.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from prometheus_client import Counter

from memory_bridge.core.errors import ProxyError
from memory_bridge.tenancy.config import Limits

WINDOW = 60  # seconds
BYTES_PER_TOKEN = 4

REFUSED = Counter(
    "memorybridge_token_limited",
    "Requests refused by a token's own limits (429), by token id and limit.",
    ["token_id", "limit"],
)


class _Minute:
    """Amounts over the last minute, in one-second buckets (at most 60 of them)."""

    __slots__ = ("_buckets", "total")

    def __init__(self) -> None:
        self._buckets: deque[list[int]] = deque()
        self.total = 0

    def _expire(self, now: int) -> None:
        while self._buckets and self._buckets[0][0] <= now - WINDOW:
            self.total -= self._buckets.popleft()[1]

    def room(self, now: int, amount: int, limit: int) -> int:
        """0 when `amount` more fits under `limit`; else the seconds until it would (or until
        the window is empty, when `amount` alone is more than the limit)."""
        self._expire(now)
        if self.total + amount <= limit or not self._buckets:
            return 0
        left = self.total
        for second, count in self._buckets:
            left -= count
            if left + amount <= limit:
                return second + WINDOW - now
        return self._buckets[-1][0] + WINDOW - now

    def add(self, now: int, amount: int) -> None:
        if amount <= 0:
            return
        if self._buckets and self._buckets[-1][0] == now:
            self._buckets[-1][1] += amount
        else:
            self._buckets.append([now, amount])
        self.total += amount


@dataclass(slots=True)
class _TokenState:
    in_flight: int = 0
    requests: _Minute = field(default_factory=_Minute)
    tokens: _Minute = field(default_factory=_Minute)


def estimated_tokens(body_bytes: int) -> int:
    return math.ceil(body_bytes / BYTES_PER_TOKEN)


def _refused(token_id: int, limit: str, message: str, retry_after: int) -> ProxyError:
    REFUSED.labels(str(token_id), limit).inc()
    return ProxyError(
        429, "rate_limit_exceeded", message, (("Retry-After", str(max(1, retry_after))),)
    )


class TokenLimiter:
    def __init__(self) -> None:
        self._tokens: dict[int, _TokenState] = {}

    def admit(self, token_id: int, limits: Limits, declared_bytes: int | None) -> None:
        """Count the request in, or raise its 429 (`ProxyError`) and count nothing; an
        admitted request must be `release`d when it is over."""
        state = self._tokens.setdefault(token_id, _TokenState())
        now = int(time.monotonic())
        if limits.max_concurrent is not None and state.in_flight >= limits.max_concurrent:
            raise _refused(
                token_id,
                "max_concurrent",
                f"This token is limited to {limits.max_concurrent} concurrent requests.",
                1,
            )
        rpm = limits.requests_per_minute
        if rpm is not None and (wait := state.requests.room(now, 1, rpm)):
            raise _refused(
                token_id,
                "requests_per_minute",
                f"This token is limited to {rpm} requests per minute.",
                wait,
            )
        tokens = estimated_tokens(declared_bytes or 0)
        tpm = limits.tokens_per_minute
        if tpm is not None and (wait := state.tokens.room(now, tokens, tpm)):
            raise _refused(
                token_id,
                "tokens_per_minute",
                f"This token is limited to {tpm} input tokens per minute "
                f"(this request is about {tokens}).",
                wait,
            )
        state.in_flight += 1
        state.requests.add(now, 1)
        state.tokens.add(now, tokens)

    def release(self, token_id: int, unannounced_bytes: int = 0) -> None:
        """The request is over; `unannounced_bytes`: a body read without `Content-Length`."""
        state = self._tokens.get(token_id)
        if state is None:
            return
        state.in_flight = max(0, state.in_flight - 1)
        state.tokens.add(int(time.monotonic()), estimated_tokens(unannounced_bytes))
