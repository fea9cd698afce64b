"""Overview: the last hour and day as charts (requests, added latency, injected items, turns
stored, queue depth, job failures), and the health of each layer with its last error."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy import text
from starlette.responses import Response

from memory_bridge.core import metrics
from memory_bridge.core.metrics import Minute
from memory_bridge.http.console import session as auth
from memory_bridge.http.console.charts import bars
from memory_bridge.http.console.views import page
from memory_bridge.http.metrics_route import sample_queue
from memory_bridge.http.services import services_of
from memory_bridge.storage.console_sessions import ConsoleSession

router = APIRouter()
CHART_TITLES = (
    "Requests (chat and responses)",
    "Added latency p50 (blue) / p95 (orange), ms",
    "Injected items",
    "Turns stored (blue) / not stored (orange)",
    "Queue depth (open jobs)",
    "Job failures",
)
Signed = Annotated[ConsoleSession, Depends(auth.current)]


def _buckets(minutes: Sequence[Minute], span: int, width: int) -> list[list[Minute]]:
    """`span` minutes up to now in buckets of `width` minutes, oldest first."""
    now = int(time.time() // 60)
    count = span // width
    out: list[list[Minute]] = [[] for _ in range(count)]
    for m in minutes:
        index = count - 1 - (now - m.at) // width
        if 0 <= index < count:
            out[index].append(m)
    return out


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _charts(span: int, width: int, first: str) -> list[Any]:
    buckets = _buckets(metrics.HISTORY.since(span * 60), span, width)

    def lat(b: list[Minute], q: float) -> float:
        return 1000 * _percentile([x for m in b for x in m.latencies], q)

    depth = [max((m.queue_depth or 0 for m in b), default=0) for b in buckets]
    return [
        bars(
            "Requests (chat and responses)",
            [sum(m.requests for m in b) for b in buckets],
            first,
            "now",
        ),
        bars(
            "Added latency p50 / p95 (ms)",
            [lat(b, 0.5) for b in buckets],
            first,
            "now",
            " ms",
            [lat(b, 0.95) for b in buckets],
        ),
        bars(
            "Injected items",
            [sum(sum(m.injected.values()) for m in b) for b in buckets],
            first,
            "now",
        ),
        bars(
            "Turns stored / not stored",
            [sum(m.stored for m in b) for b in buckets],
            first,
            "now",
            second=[sum(m.not_stored for m in b) for b in buckets],
        ),
        bars("Queue depth (open jobs)", depth, first, "now"),
        bars("Job failures", [sum(m.job_failures for m in b) for b in buckets], first, "now"),
    ]


@router.get("/")
async def overview(request: Request, session: Signed) -> Response:
    services = services_of(request)
    db_error = ""
    try:
        await services.memory.db.run(lambda conn: conn.execute(text("SELECT 1")))
        await sample_queue(request)
    except Exception as exc:
        db_error = type(exc).__name__
    if services.storage_health.failing:
        db_error = db_error or (services.storage_health.last_error or "writes failing")
    health = [{"layer": "database", "ok": not db_error, "error": db_error, "at": None}]
    for layer in ("longterm", "episodic", "curated", "history", "gateway", "upstream"):
        last = metrics.LAST_ERRORS.get(layer)
        recent = last is not None and time.time() - last[1] < 3600
        health.append(
            {
                "layer": layer,
                "ok": not recent,
                "error": last[0] if last else "",
                "at": last[1] if last else None,
            }
        )
    injected: dict[str, int] = {}
    for m in metrics.HISTORY.since(86400):
        for source, count in m.injected.items():
            injected[source] = injected.get(source, 0) + count
    return page(
        request,
        "overview.html",
        session,
        hour=_charts(60, 1, "−60 min"),
        day=_charts(24 * 60, 60, "−24 h"),
        health=health,
        injected=injected,
        chart_titles=CHART_TITLES,
    )
