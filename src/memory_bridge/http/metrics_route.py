"""`GET /metrics`: Prometheus' text format, for the admin token or METRICS_TOKEN (the edge
checks; this route checks again). The queue's depth is read from the database at each scrape:
any process (a separate worker's included) changes it."""

from __future__ import annotations

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Connection
from starlette.responses import Response

from memory_bridge.core import metrics
from memory_bridge.core.errors import ProxyError
from memory_bridge.events import backlog, queue_reads
from memory_bridge.http.edge import METRICS_PRINCIPAL
from memory_bridge.http.services import services_of
from memory_bridge.storage.tokens import Principal

router = APIRouter()
Depth = dict[tuple[str, str], int]  # jobs per (consumer, status)


async def sample_queue(request: Request) -> Depth:
    """Read the queue's depth into the metrics; returns it too (the console's Overview)."""
    db = services_of(request).memory.db

    def read(conn: Connection) -> tuple[Depth, float | None, dict[str, float], dict[int, int]]:
        counts, lag = queue_reads.depth(conn)
        busiest = queue_reads.busiest(conn, metrics.BUSIEST_TOKENS)
        return counts, lag, backlog.freshness(conn), busiest

    counts, lag, lags, busiest = await db.run(read)
    metrics.queue_depth(counts, lag)
    metrics.backlog(counts, lags)
    metrics.busiest_tokens(busiest)
    return counts


def sample_vectors(request: Request) -> None:
    """The embedded engine's open and parked shards (a lock and two lengths: no I/O)."""
    state = services_of(request).memory.vectors.shard_state()
    if state is not None:
        metrics.vector_shards(state.open, state.parked, state.bound)


@router.get("/metrics", include_in_schema=False)
async def prometheus_metrics(request: Request) -> Response:
    principal = request.scope.get("state", {}).get("principal")
    allowed = principal is METRICS_PRINCIPAL or (
        isinstance(principal, Principal) and principal.is_admin
    )
    if not allowed:
        raise ProxyError(403, "permission_error", "This endpoint needs the admin token.")
    await sample_queue(request)
    sample_vectors(request)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
