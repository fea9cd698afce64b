"""Admin API for a token's after-turn work: the job queue's summary, the jobs that need an
operator (failed, unknown), and a manual retry. Documented in docs/admin-api.md."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel
from sqlalchemy import Connection

from memory_bridge.core.errors import ProxyError
from memory_bridge.events import queue, queue_reads
from memory_bridge.http.admin.schemas import MAX_DB_ID, TokenId, error_responses
from memory_bridge.http.services import services_of
from memory_bridge.sources.services import MemoryServices
from memory_bridge.storage.tokens import TokenStore

router = APIRouter(
    prefix="/tokens/{token_id}/jobs",
    tags=["job queue"],
)
JobId = Annotated[int, Path(ge=1, le=MAX_DB_ID, description="A job's id, as listed.")]
Attention = Literal["failed", "unknown"]


class QueueSummary(BaseModel):
    consumers: dict[str, dict[str, int]]
    oldest_pending_age_seconds: float | None


class JobItem(BaseModel):
    id: int
    event_id: str
    consumer: str
    status: str
    step: str | None
    attempts: int
    last_error: str | None
    created_at: float
    updated_at: float


class JobList(BaseModel):
    data: list[JobItem]


async def _known(request: Request, token_id: int) -> MemoryServices:
    tokens: TokenStore = services_of(request).memory.tokens
    if await tokens.get(token_id) is None:
        raise ProxyError(404, "not_found_error", f"No token with id {token_id}.")
    runtime: MemoryServices = services_of(request).memory
    return runtime


@router.get("", response_model=QueueSummary, responses=error_responses(404))
async def queue_summary(request: Request, token_id: TokenId) -> QueueSummary:
    """Counts by consumer and status, and how long the oldest open job has waited."""
    runtime = await _known(request, token_id)
    summary = await runtime.db.run(lambda conn: queue_reads.summary(conn, token_id))
    return QueueSummary.model_validate(summary)


@router.get("/attention", response_model=JobList, responses=error_responses(404))
async def jobs_needing_attention(
    request: Request,
    token_id: TokenId,
    status: Annotated[list[Attention] | None, Query(description="Default: both.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobList:
    """Failed jobs (retries exhausted or refused for good) and unknown ones (a Gateway add
    that may have happened: never retried automatically), oldest first."""
    runtime = await _known(request, token_id)
    wanted = tuple(status or ("failed", "unknown"))
    rows = await runtime.db.run(lambda conn: queue_reads.listed(conn, token_id, wanted, limit))
    return JobList(data=[JobItem.model_validate(r) for r in rows])


@router.post("/{job_id}/retry", response_model=JobItem, responses=error_responses(404, 409))
async def retry_job(request: Request, token_id: TokenId, job_id: JobId) -> JobItem:
    """Put a failed or unknown job back in the queue (counted as a retry: Mem0 first removes
    what earlier attempts wrote; an unknown job's step is cleared, so it runs again). For an unknown
    Gateway add this may store the turn twice: check the Gateway first."""
    runtime = await _known(request, token_id)

    def work(conn: Connection) -> dict[str, object] | None:
        if not queue.requeue(conn, token_id, job_id):
            return None
        return queue_reads.one(conn, token_id, job_id)

    row = await runtime.db.write(work)
    if row is None:
        raise ProxyError(
            409, "conflict_error", f"No failed or unknown job {job_id} of token {token_id}."
        )
    worker = services_of(request).worker
    if worker is not None:
        worker.wake()
    return JobItem.model_validate(row)
