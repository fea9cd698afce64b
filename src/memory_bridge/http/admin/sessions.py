"""Admin API for a token's conversations: its end users, their sessions, one session's stored
history (paged), and deleting one session.

Users and sessions are what the chat path stored: `user` is the body's `user` or `X-User-Id`
("" for requests without one), `session` is `X-Session-Id` ("default" without one). Both are
query parameters, not path segments, because they may hold any printable character, `/`
included. Deleting a session deletes it everywhere at once (`lifecycle.forget`): its stored
messages, its turns in the event log (a content-free `session.deleted` stays), its episodic
vectors, the long-term facts its turns added and the traces that recalled it; the next request
of that session starts without history.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from memory_bridge.core.errors import ProxyError
from memory_bridge.core.timestamps import iso_utc
from memory_bridge.core.turn import TOKEN_WIDE_USER
from memory_bridge.events.session_index import SessionIndex
from memory_bridge.http.admin.schemas import (
    LABEL_PATTERN,
    MAX_DB_ID,
    MAX_LABEL,
    TokenId,
    error_responses,
    label_query,
)
from memory_bridge.http.services import services_of
from memory_bridge.lifecycle import forget
from memory_bridge.sources.services import MemoryServices

router = APIRouter(
    prefix="/tokens/{token_id}",
    tags=["sessions"],
)

MAX_OFFSET = 1_000_000  # deeper than any listing a person pages through

UserParam = Annotated[str, label_query('The end user ("" or left out: requests that named none).')]
SessionParam = Annotated[
    str,
    Query(
        min_length=1,
        max_length=MAX_LABEL,
        pattern=LABEL_PATTERN,
        description="The session id (X-Session-Id; `default` for requests without one).",
    ),
]
Limit = Annotated[int, Query(ge=1, le=1000, description="At most this many.")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Skip this many (paging).")]
After = Annotated[
    int, Query(ge=0, le=MAX_DB_ID, description="Only messages with a larger id (paging).")
]


class UserItem(BaseModel):
    user: str = Field(description='The end user; "" for requests that named none.')
    sessions: int
    messages: int
    last_activity: str | None


class UserList(BaseModel):
    data: list[UserItem]
    has_more: bool


class SessionItem(BaseModel):
    user: str
    session: str
    messages: int = Field(description="Stored messages (the turns' new messages and replies).")
    first_activity: str | None
    last_activity: str | None


class SessionList(BaseModel):
    data: list[SessionItem]
    has_more: bool


class HistoryItem(BaseModel):
    id: int
    role: str
    message: dict[str, Any] = Field(
        description="As stored: role, content, and name / tool_calls / tool_call_id if any."
    )
    created_at: str | None


class HistoryPage(BaseModel):
    data: list[HistoryItem]
    next_after: int | None = Field(
        description="Pass as `after` for the next page; null on the last page."
    )


def _index(request: Request) -> SessionIndex:
    runtime: MemoryServices = services_of(request).memory
    return SessionIndex(runtime.db)


async def _known(request: Request, token_id: int) -> None:
    runtime: MemoryServices = services_of(request).memory
    if await runtime.tokens.get(token_id) is None:
        raise ProxyError(404, "not_found_error", f"No token with id {token_id}.")


@router.get("/users", response_model=UserList, responses=error_responses(404))
async def list_users(
    request: Request, token_id: TokenId, limit: Limit = 100, offset: Offset = 0
) -> dict[str, Any]:
    await _known(request, token_id)
    found = await _index(request).users(token_id, limit + 1, offset)
    return {
        "data": [
            {
                "user": u.user,
                "sessions": u.sessions,
                "messages": u.messages,
                "last_activity": iso_utc(u.last_activity),
            }
            for u in found[:limit]
        ],
        "has_more": len(found) > limit,
    }


@router.get("/sessions", response_model=SessionList, responses=error_responses(404))
async def list_sessions(
    request: Request,
    token_id: TokenId,
    user: Annotated[str | None, label_query("Only this end user's sessions.")] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> dict[str, Any]:
    await _known(request, token_id)
    found = await _index(request).sessions(token_id, user, limit + 1, offset)
    return {
        "data": [
            {
                "user": s.user,
                "session": s.session,
                "messages": s.messages,
                "first_activity": iso_utc(s.first_activity),
                "last_activity": iso_utc(s.last_activity),
            }
            for s in found[:limit]
        ],
        "has_more": len(found) > limit,
    }


@router.get("/sessions/messages", response_model=HistoryPage, responses=error_responses(404))
async def session_history(
    request: Request,
    token_id: TokenId,
    session: SessionParam,
    user: UserParam = TOKEN_WIDE_USER,
    after: After = 0,
    limit: Limit = 100,
) -> dict[str, Any]:
    """One session's stored history, oldest first (an unknown session is an empty page)."""
    await _known(request, token_id)
    rows = await _index(request).history(token_id, user, session, after, limit + 1)
    page = rows[:limit]
    return {
        "data": [
            {"id": r.id, "role": r.role, "message": r.message, "created_at": iso_utc(r.created_at)}
            for r in page
        ],
        "next_after": page[-1].id if len(rows) > limit else None,
    }


@router.delete(
    "/sessions", status_code=204, response_class=Response, responses=error_responses(404)
)
async def delete_session(
    request: Request, token_id: TokenId, session: SessionParam, user: UserParam = TOKEN_WIDE_USER
) -> Response:
    """Delete one session everywhere (`lifecycle.forget`): its stored history, its turns in
    the event log, episodic vectors, the long-term facts it added, traces that recalled it;
    404 if it holds nothing."""
    await _known(request, token_id)
    meta = {"source": "admin", "request_id": request.state.request_id}
    services = services_of(request)
    found = await forget.delete_session(
        services.memory, token_id, user, session, meta, traces=services.traces
    )
    if not found:
        raise ProxyError(
            404, "not_found_error", f"Token {token_id} has no stored session by that name."
        )
    return Response(status_code=204)
