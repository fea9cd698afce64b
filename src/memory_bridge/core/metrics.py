"""The process's metrics: Prometheus series (`/metrics`) and a small in-process history of the
last day, minute by minute, that the console's Overview draws.

Labels are bounded and carry no secret and no message text: a route is one of a fixed set of
names, a token is its numeric id, a source or consumer is a layer's name, an error is a
category. Each figure is recorded once, here, for both views.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

REQUESTS = Counter(
    "memorybridge_requests",
    "Requests answered, by route, status and token id (the admin token's id included).",
    ["route", "status", "token_id"],
)
STAGE_SECONDS = Histogram(
    "memorybridge_stage_seconds",
    "Time spent per stage of a request: auth, recall:<source>, forge, added (everything "
    "before the forward), upstream_first_byte, total.",
    ["stage"],
    buckets=_LATENCY_BUCKETS,
)
INJECTED_ITEMS = Counter(
    "memorybridge_injected_items", "Memory items injected into prompts, per source.", ["source"]
)
INJECTED_TOKENS = Counter(
    "memorybridge_injected_tokens",
    "Tokens of memory injected into prompts, per source.",
    ["source"],
)
TURNS = Counter("memorybridge_turns", "Completed turns, stored or not stored.", ["outcome"])
JOB_OUTCOMES = Counter(
    "memorybridge_job_outcomes",
    "After-turn jobs that ended (done, failed, unknown) or were retried, per consumer.",
    ["consumer", "outcome"],
)
QUEUE_DEPTH = Gauge(
    "memorybridge_queue_depth",
    "Jobs not done, per consumer and status (read from the database at each scrape).",
    ["consumer", "status"],
)
QUEUE_LAG = Gauge(
    "memorybridge_queue_lag_seconds", "Age of the oldest open job (0 when none is open)."
)
FRESHNESS_LAG = Gauge(
    "memorybridge_memory_freshness_lag_seconds",
    "Per consumer, how long its oldest due open job has waited since it was due: how far its "
    "memory lags behind the stored turns (0 when none waits; read at each scrape).",
    ["consumer"],
)
PENDING_JOBS = Gauge(
    "memorybridge_memory_pending_jobs",
    "Open jobs (pending, coalesced or running) per consumer: the turns whose memory work is "
    "still to do (read from the database at each scrape).",
    ["consumer"],
)
TOKEN_OPEN_JOBS = Gauge(
    "memorybridge_token_open_jobs",
    "Open jobs (pending, coalesced or running) of the tokens with the most, at most "
    "BUSIEST_TOKENS of them: whose backlog it is (read from the database at each scrape).",
    ["token_id"],
)
# Tokens `memorybridge_token_open_jobs` names at once: a bound on its label values.
BUSIEST_TOKENS = 10
PAST_BOUND = Counter(
    "memorybridge_jobs_past_bound",
    "Turns' jobs enqueued past the backlog's bound (JOB_MAX_PENDING_PER_TOKEN, JOB_MAX_PENDING),"
    " per consumer: coalesced (run later, in batches), deferred (work that cannot be merged, past"
    " its token's bound: run later, one by one) or pending (past the overall bound only).",
    ["consumer", "outcome"],
)
VECTOR_SHARDS_OPEN = Gauge(
    "memorybridge_vector_shards_open",
    "Embedded vector shards open now (at most VECTOR_MAX_OPEN_SHARDS, but while every open one "
    "is busy; read at each scrape).",
)
VECTOR_SHARDS_PARKED = Gauge(
    "memorybridge_vector_shards_parked",
    "Embedded vector shards closed to keep the open ones within the bound; each reopens on its "
    "next use (read at each scrape).",
)
VECTOR_SHARDS_BOUND = Gauge(
    "memorybridge_vector_shards_max_open",
    "The bound on open embedded vector shards (VECTOR_MAX_OPEN_SHARDS; 0: none).",
)
VECTOR_SHARD_REOPENS = Counter(
    "memorybridge_vector_shard_reopens",
    "Parked vector shards opened again by a read or a write (each paid the shard's load): "
    "steadily rising, the bound is below the tokens active at once.",
)
UPSTREAM_ERRORS = Counter(
    "memorybridge_upstream_errors",
    "Upstream failures: a network category (timeout, connect_failed, ...) or http_4xx/http_5xx.",
    ["kind"],
)
PROMPT_TOKENS = Counter(
    "memorybridge_upstream_prompt_tokens",
    "Prompt tokens the upstream reported (usage), per token id.",
    ["token_id"],
)
CACHED_PROMPT_TOKENS = Counter(
    "memorybridge_upstream_cached_prompt_tokens",
    "Prompt tokens the upstream served from its cache (usage.prompt_tokens_details."
    "cached_tokens, or input_tokens_details for the Responses API), per token id.",
    ["token_id"],
)

_MINUTE = 60
_KEPT_MINUTES = 24 * 60
_SAMPLES_PER_MINUTE = 256  # latency samples kept per minute for its percentiles


@dataclass
class Minute:
    at: int  # epoch minute
    requests: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)  # added latency, seconds
    injected: dict[str, int] = field(default_factory=dict)
    stored: int = 0
    not_stored: int = 0
    queue_depth: int | None = None
    job_failures: int = 0


class History:
    """The last day of figures, per minute, for the console's charts (this process only)."""

    def __init__(self) -> None:
        self._minutes: deque[Minute] = deque(maxlen=_KEPT_MINUTES)
        self._lock = threading.Lock()

    def _now(self) -> Minute:
        at = int(time.time() // _MINUTE)
        if not self._minutes or self._minutes[-1].at != at:
            self._minutes.append(Minute(at))
        return self._minutes[-1]

    def update(self, **changes: Any) -> None:
        with self._lock:
            minute = self._now()
            for name, value in changes.items():
                if name == "latency":
                    if len(minute.latencies) < _SAMPLES_PER_MINUTE:
                        minute.latencies.append(value)
                elif name == "injected":
                    for source, count in value.items():
                        minute.injected[source] = minute.injected.get(source, 0) + count
                elif name == "queue_depth":
                    minute.queue_depth = value
                else:
                    setattr(minute, name, getattr(minute, name) + value)

    def since(self, seconds: float) -> list[Minute]:
        first = int((time.time() - seconds) // _MINUTE)
        with self._lock:
            return [m for m in self._minutes if m.at > first]


HISTORY = History()


def request_done(route: str, status: int, token_id: int | None, seconds: float) -> None:
    REQUESTS.labels(route, str(status), "" if token_id is None else str(token_id)).inc()
    STAGE_SECONDS.labels("total").observe(seconds)
    if route in ("chat", "responses"):
        HISTORY.update(requests=1, errors=int(status >= 400))


def stage(name: str, seconds: float) -> None:
    STAGE_SECONDS.labels(name).observe(seconds)
    if name == "added":
        HISTORY.update(latency=seconds)


def injected(per_source: dict[str, tuple[int, int]]) -> None:
    """Items and tokens injected into one prompt, per source."""
    counts = {}
    for source, (items, tokens) in per_source.items():
        if items:
            INJECTED_ITEMS.labels(source).inc(items)
            INJECTED_TOKENS.labels(source).inc(tokens)
            counts[source] = items
    if counts:
        HISTORY.update(injected=counts)


def turn(stored: bool) -> None:
    TURNS.labels("stored" if stored else "not_stored").inc()
    HISTORY.update(**({"stored": 1} if stored else {"not_stored": 1}))


def job_outcome(consumer: str, outcome: str) -> None:
    JOB_OUTCOMES.labels(consumer, outcome).inc()
    if outcome in ("failed", "unknown"):
        HISTORY.update(job_failures=1)


def queue_depth(counts: dict[tuple[str, str], int], lag: float | None) -> None:
    QUEUE_DEPTH.clear()
    for (consumer, status), count in counts.items():
        QUEUE_DEPTH.labels(consumer, status).set(count)
    QUEUE_LAG.set(lag or 0.0)
    HISTORY.update(
        queue_depth=sum(
            c for (_, s), c in counts.items() if s in ("pending", "running", "coalesced")
        )
    )


_BACKLOG_CONSUMERS: set[str] = set()


def backlog(counts: dict[tuple[str, str], int], lags: dict[str, float]) -> None:
    """The backlog per consumer: its open jobs and its freshness lag."""
    pending: dict[str, int] = {}
    for (consumer, status), count in counts.items():
        if status in ("pending", "running", "coalesced"):
            pending[consumer] = pending.get(consumer, 0) + count
    # A consumer once seen stays at 0 rather than vanishing: an alert on it sees the drain.
    _BACKLOG_CONSUMERS.update(pending, lags)
    for consumer in _BACKLOG_CONSUMERS:
        PENDING_JOBS.labels(consumer).set(pending.get(consumer, 0))
        FRESHNESS_LAG.labels(consumer).set(lags.get(consumer, 0.0))


def busiest_tokens(open_jobs: dict[int, int]) -> None:
    """The tokens with the most open jobs now; a token that drained drops out of the series."""
    TOKEN_OPEN_JOBS.clear()
    for token_id, count in open_jobs.items():
        TOKEN_OPEN_JOBS.labels(str(token_id)).set(count)


def past_bound(outcomes: dict[str, str]) -> None:
    """Per consumer, how its job enqueued past a bound waits: coalesced, deferred or pending."""
    for consumer, outcome in outcomes.items():
        PAST_BOUND.labels(consumer, outcome).inc()


def vector_shards(open_now: int, parked: int, bound: int) -> None:
    VECTOR_SHARDS_OPEN.set(open_now)
    VECTOR_SHARDS_PARKED.set(parked)
    VECTOR_SHARDS_BOUND.set(bound)


def shard_reopened() -> None:
    """Called by the embedded engine, in whichever thread reopened the shard."""
    VECTOR_SHARD_REOPENS.inc()


# The last failure seen per layer (a category or class name, and when): the Overview's health.
LAST_ERRORS: dict[str, tuple[str, float]] = {}


def layer_error(layer: str, category: str) -> None:
    LAST_ERRORS[layer] = (category, time.time())


def upstream_error(kind: str) -> None:
    UPSTREAM_ERRORS.labels(kind).inc()
    layer_error("upstream", kind)


def usage(token_id: int, reported: dict[str, Any] | None) -> None:
    """The prompt and cached prompt tokens of an upstream's `usage` (either API's shape)."""
    if not reported:
        return
    prompt = reported.get("prompt_tokens", reported.get("input_tokens"))
    details = reported.get("prompt_tokens_details") or reported.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    label = str(token_id)
    if isinstance(prompt, int) and prompt >= 0:
        PROMPT_TOKENS.labels(label).inc(prompt)
    if isinstance(cached, int) and cached >= 0:
        CACHED_PROMPT_TOKENS.labels(label).inc(cached)


def cached_tokens(reported: dict[str, Any] | None) -> int | None:
    if not reported:
        return None
    details = reported.get("prompt_tokens_details") or reported.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if isinstance(cached, int) else None
