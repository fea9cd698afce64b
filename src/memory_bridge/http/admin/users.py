"""Admin API: erase one end user of a token from every memory layer (docs/admin-api.md).

The user is a path segment, matched as a path (`{user:path}`) because a user id may hold `/`;
it is validated like every other user label (bounded, no control characters).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, Field

from memory_bridge.core.errors import ProxyError
from memory_bridge.http.admin.schemas import (
    LABEL_PATTERN,
    MAX_LABEL,
    TokenId,
    error_responses,
    label_query,
)
from memory_bridge.http.services import services_of
from memory_bridge.lifecycle.erase import erase_user
from memory_bridge.sources.services import MemoryServices
from memory_bridge.storage.traces import TraceStore

router = APIRouter(
    prefix="/tokens/{token_id}",
    tags=["end users"],
)

UserPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_LABEL,
        pattern=LABEL_PATTERN,
        description="The end user (the body's `user` or X-User-Id they were served under).",
        examples=["alice"],
    ),
]


class ErasedUser(BaseModel):
    """The erasure's receipt (also kept in the audit log, as a `user_erased` event)."""

    user: str
    counts: dict[str, int] = Field(
        description="What was removed, per layer: events, sessions, messages, curated, jobs, "
        "traces, audit, episodic and longterm (vectors), imports (stale staged imports). All "
        "zero when nothing was left."
    )
    longterm: str = Field(description='"erased", or "off" when the token has no long-term memory.')
    layers: dict[str, str] = Field(
        description="What each layer did: database, longterm, vectors, imports, and storage "
        "(how the database files were rewritten)."
    )
    generations_compacted: list[dict[str, Any]] = Field(
        description="Every vector shard (model, dims) rewritten without the user's points."
    )
    erased_at: str = Field(description="When the erasure finished (ISO 8601, UTC).")
    seconds: float = Field(description="How long it took.")


@router.delete(
    "/users/{user:path}",
    response_model=ErasedUser,
    responses=error_responses(404, 502),
)
async def erase_end_user(request: Request, token_id: TokenId, user: UserPath) -> dict[str, Any]:
    """Erase everything of one end user: history in every session, their USER.md, episodic
    vectors, long-term memories, traces, jobs and their events, leaving one content-free
    `user.erased` event. Idempotent: a second call answers zero counts."""
    return await _erase(request, token_id, user)


@router.delete("/users", response_model=ErasedUser, responses=error_responses(404, 502))
async def erase_user_by_query(
    request: Request,
    token_id: TokenId,
    user: Annotated[str, label_query('The end user; "" (`?user=`) is the token-wide one.')],
) -> dict[str, Any]:
    """The same erasure, the end user named as a query parameter: the only way to name the
    token-wide user "" (the requests that named none)."""
    return await _erase(request, token_id, user)


async def _erase(request: Request, token_id: int, user: str) -> dict[str, Any]:
    runtime: MemoryServices = services_of(request).memory
    if await runtime.tokens.get(token_id) is None:
        raise ProxyError(404, "not_found_error", f"No token with id {token_id}.")
    traces: TraceStore = services_of(request).traces
    try:
        erased = await erase_user(
            runtime, token_id, user, traces=traces, request_id=request.state.request_id
        )
    except ProxyError:
        raise
    except Exception as exc:
        # A vector layer failed (the database part is done): what is left is deleted by
        # user on a retry. Only the exception's type: its text may carry a backend's secret.
        raise ProxyError(
            502,
            "memory_unavailable",
            f"The erasure did not finish ({type(exc).__name__}); retry the call.",
        ) from exc
    return {"user": user, **erased.as_json()}
