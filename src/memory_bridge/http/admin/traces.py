"""Admin API for context traces: what one chat request was given from memory, and why."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, Field

from memory_bridge.core.errors import ProxyError
from memory_bridge.http.admin.schemas import TokenId, error_responses
from memory_bridge.http.services import services_of
from memory_bridge.storage.tokens import TokenStore
from memory_bridge.storage.traces import TraceStore

router = APIRouter(
    prefix="/tokens/{token_id}/traces",
    tags=["context traces"],
)
RequestId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=16,
        pattern=r"^[0-9a-f]+$",
        description="The request's `X-Request-Id`.",
        examples=["1a2b3c4d"],
    ),
]


class Trace(BaseModel):
    request_id: str
    budget_tokens: int
    recalled_tokens: int
    candidates: list[dict[str, Any]]
    blocks: list[dict[str, Any]]
    # The relevance floor: its values and whether the request's candidates cleared it (absent
    # in traces kept before it existed).
    floor: dict[str, Any] | None = None
    # The intent read from the user's message and the weights it was ranked with.
    intent: str | None = None
    weights: dict[str, Any] | None = None
    # Fading's half-life and floor, when the token has it on; each candidate then carries
    # its `scores.fade`, `last_used` and `importance`.
    fading: dict[str, Any] | None = None
    # The request's messages that are stored shortened (cut text, payload placeholders).
    stored_shortened: int = 0
    user: str | None = Field(
        default=None, description='The end user the request was served as ("": none named).'
    )
    session: str | None = Field(default=None, description="The request's session.")


@router.get("/{request_id}", response_model=Trace, responses=error_responses(404))
async def get_trace(request: Request, token_id: TokenId, request_id: RequestId) -> Trace:
    """Every candidate the Context Forge saw for this request — source, id, text digest,
    scores, rank, tokens, kept or the reason it was dropped — and the blocks placed as they
    came (history, curated, the Gateway reference). Kept for TRACE_RETENTION_COUNT requests
    and TRACE_RETENTION_SECONDS per token."""
    tokens: TokenStore = services_of(request).memory.tokens
    if await tokens.get(token_id) is None:
        raise ProxyError(404, "not_found_error", f"No token with id {token_id}.")
    traces: TraceStore = services_of(request).traces
    trace = await traces.get(token_id, request_id)
    if trace is None:
        raise ProxyError(404, "not_found_error", f"No trace of request {request_id}.")
    return Trace.model_validate({"request_id": request_id, **trace})
