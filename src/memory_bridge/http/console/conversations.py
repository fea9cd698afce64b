"""Conversations: a token's end users and sessions; a session as a transcript whose turns
each open their context trace (what memory was injected, and why)."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Path, Query, Request
from sqlalchemy import Connection, select
from starlette.responses import Response

from memory_bridge.events import log as event_log
from memory_bridge.events.model import EventType, session_aggregate
from memory_bridge.events.session_index import SessionIndex
from memory_bridge.http.console import session as auth
from memory_bridge.http.console.views import PAGE, offset_of, page, redirect, token_choices
from memory_bridge.http.services import services_of
from memory_bridge.storage.console_sessions import ConsoleSession
from memory_bridge.storage.tables import memory_events

router = APIRouter()
Signed = Annotated[ConsoleSession, Depends(auth.current)]
TokenQ = Annotated[int | None, Query(ge=1, le=2**31 - 1)]
Label = Annotated[str, Query(max_length=200)]
TURNS_PER_PAGE = 20


@router.get("/conversations")
async def conversations(
    request: Request, session: Signed, token: TokenQ = None, user: Label | None = None
) -> Response:
    tokens = await token_choices(request)
    token = token or (tokens[0]["id"] if tokens else None)
    offset = offset_of(request)
    index = SessionIndex(services_of(request).memory.db)
    users: list[Any] = []
    sessions: list[Any] = []
    has_more = False
    if token is not None:
        if user is None:
            found = await index.users(token, PAGE + 1, offset)
            users, has_more = found[:PAGE], len(found) > PAGE
        else:
            found_s = await index.sessions(token, user, PAGE + 1, offset)
            sessions, has_more = found_s[:PAGE], len(found_s) > PAGE
    return page(
        request,
        "conversations.html",
        session,
        tokens=tokens,
        token=token,
        user=user,
        users=users,
        sessions=sessions,
        offset=offset,
        has_more=has_more,
        size=PAGE,
    )


def _turns(token: int, user: str, name: str, after: int) -> Any:
    aggregate = session_aggregate(token, user, name)

    def read(conn: Connection) -> list[Any]:
        query = (
            select(memory_events)
            .where(
                memory_events.c.aggregate_id == aggregate,
                memory_events.c.token_id == token,
                memory_events.c.type == EventType.SESSION_APPENDED.value,
                memory_events.c.version > after,
            )
            .order_by(memory_events.c.version)
            .limit(TURNS_PER_PAGE + 1)
        )
        return [event_log.stored_event(row) for row in conn.execute(query)]

    return read


@router.get("/conversations/session")
async def transcript(
    request: Request,
    session: Signed,
    token: Annotated[int, Query(ge=1, le=2**31 - 1)],
    user: Label = "",
    name: Annotated[str, Query(min_length=1, max_length=200)] = "default",
    after: Annotated[int, Query(ge=0, le=2**31)] = 0,
) -> Response:
    db = services_of(request).memory.db
    events = await db.run(_turns(token, user, name, after))
    turns = [
        {
            "version": e.version,
            "request_id": e.meta.get("request_id") or "",
            "cached_tokens": e.meta.get("cached_tokens"),
            "messages": e.payload.get("messages", []),
            "finish_reason": e.payload.get("finish_reason"),
            "at": e.created_at,
        }
        for e in events[:TURNS_PER_PAGE]
    ]
    next_after = turns[-1]["version"] if len(events) > TURNS_PER_PAGE else None
    return page(
        request,
        "session.html",
        session,
        token=token,
        user=user,
        name=name,
        turns=turns,
        next_after=next_after,
    )


@router.get("/conversations/turn")
async def turn(
    request: Request,
    session: Signed,
    token: Annotated[int, Query(ge=1, le=2**31 - 1)],
    event: Annotated[str, Query(pattern=r"^[0-9a-f-]{36}$")],
) -> Response:
    """The turn a memory came from (its lineage): its place in its session's transcript."""

    def read(conn: Connection) -> Any:
        return conn.execute(
            select(memory_events).where(
                memory_events.c.event_id == event, memory_events.c.token_id == token
            )
        ).first()

    row = await services_of(request).memory.db.run(read)
    if row is None or row.type != EventType.SESSION_APPENDED.value:
        return page(request, "error.html", session, 404, error="That turn is no longer stored.")
    found = event_log.stored_event(row)
    query = urlencode(
        {
            "token": token,
            "user": found.payload.get("user", ""),
            "name": found.payload.get("session", ""),
            "after": found.version - 1,
        }
    )
    return redirect(f"/console/conversations/session?{query}")


@router.get("/traces/{token}/{request_id}")
async def trace(
    request: Request,
    session: Signed,
    token: Annotated[int, Path(ge=1, le=2**31 - 1)],
    request_id: Annotated[str, Path(min_length=1, max_length=16, pattern=r"^[0-9a-f]+$")],
    cached: Annotated[int | None, Query(ge=0)] = None,
) -> Response:
    found = await services_of(request).traces.get(token, request_id)
    if found is None:
        return page(
            request,
            "error.html",
            session,
            404,
            error=f"No trace of request {request_id} (traces are kept for a while, then pruned).",
        )
    candidates = found.get("candidates", [])
    return page(
        request,
        "trace.html",
        session,
        token=token,
        request_id=request_id,
        trace=found,
        kept=[c for c in candidates if c.get("kept")],
        dropped=[c for c in candidates if not c.get("kept")],
        cached=cached,
    )
