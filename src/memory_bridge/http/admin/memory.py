"""Admin API for a token's curated documents (read, replace, delete) and its audit events."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from memory_bridge.core.errors import ProxyError, invalid_request
from memory_bridge.core.timestamps import iso_utc
from memory_bridge.events.curated import CuratedRepository, Kind
from memory_bridge.http.admin.schemas import (
    EventCursor,
    EventList,
    TokenId,
    error_responses,
    label_query,
    markdown_body,
)
from memory_bridge.http.services import services_of
from memory_bridge.lifecycle import forget
from memory_bridge.sources.services import MemoryServices
from memory_bridge.storage.audit import AuditLog
from memory_bridge.storage.tokens import TokenStore

router = APIRouter(
    prefix="/tokens/{token_id}",
    tags=["curated memory and events"],
)
UserParam = Annotated[str, label_query("An end user's USER.md (empty: the token-wide one).")]
KindParam = Annotated[Kind, Path(description="`memory` (MEMORY.md) or `user` (USER.md).")]


class MarkdownResponse(Response):
    media_type = "text/markdown; charset=utf-8"


async def _known(request: Request, token_id: int) -> None:
    tokens: TokenStore = services_of(request).memory.tokens
    if await tokens.get(token_id) is None:
        raise ProxyError(404, "not_found_error", f"No token with id {token_id}.")


async def _known_document(request: Request, token_id: int, kind: Kind, user: str) -> None:
    await _known(request, token_id)
    if kind == "memory" and user:
        raise invalid_request("MEMORY.md is token-wide; 'user' applies to USER.md only.")


def _curated(request: Request) -> CuratedRepository:
    repo: CuratedRepository = services_of(request).memory.curated
    return repo


@router.get(
    "/curated/{kind}",
    # Not MarkdownResponse: FastAPI would then document the JSON errors as markdown too.
    response_class=Response,
    responses={
        200: {
            "description": "The document (empty if none was written).",
            "content": {MarkdownResponse.media_type: {"schema": {"type": "string"}}},
        },
        **error_responses(404),
    },
)
async def get_curated(
    request: Request, token_id: TokenId, kind: KindParam, user: UserParam = ""
) -> Response:
    await _known_document(request, token_id, kind, user)
    body = await _curated(request).get(token_id, kind, user)
    return MarkdownResponse(body)


@router.put(
    "/curated/{kind}",
    status_code=204,
    response_class=Response,
    responses=error_responses(400, 404, 408, 413),
    openapi_extra=markdown_body(
        "The whole document, UTF-8 markdown without NUL characters, up to CURATED_MAX_BYTES."
    ),
)
async def put_curated(
    request: Request, token_id: TokenId, kind: KindParam, user: UserParam = ""
) -> Response:
    await _known_document(request, token_id, kind, user)
    limit: int = services_of(request).settings.curated_max_bytes
    raw = await request.body()
    if len(raw) > limit:
        raise ProxyError(
            413, "invalid_request_error", f"Curated documents are limited to {limit} bytes."
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_request("The document must be UTF-8 text.", 400) from None
    if "\x00" in text:  # PostgreSQL cannot store it; no markdown needs it
        raise invalid_request("The document must not contain NUL characters.")
    await _curated(request).put(token_id, kind, user, text)
    return Response(status_code=204)


@router.delete(
    "/curated/{kind}", status_code=204, response_class=Response, responses=error_responses(404)
)
async def delete_curated(
    request: Request, token_id: TokenId, kind: KindParam, user: UserParam = ""
) -> Response:
    """Delete the document (a `curated.deleted` event); 404 if there is none. An end user's
    USER.md gone, the token-wide one applies to them again."""
    await _known_document(request, token_id, kind, user)
    runtime: MemoryServices = services_of(request).memory
    meta = {"source": "admin", "request_id": request.state.request_id}
    try:
        found = await forget.delete_curated(runtime, token_id, kind, user, meta)
    finally:
        _curated(request).forget(token_id)
    if not found:
        raise ProxyError(404, "not_found_error", f"Token {token_id} has no such document.")
    return Response(status_code=204)


@router.get("/events", response_model=EventList, responses=error_responses(404))
async def list_events(
    request: Request,
    token_id: TokenId,
    session: Annotated[str | None, label_query("Only this session's events.")] = None,
    type: Annotated[str | None, label_query("Only events of this type.")] = None,
    after: EventCursor = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many.")] = 100,
) -> dict[str, Any]:
    await _known(request, token_id)
    events: AuditLog = services_of(request).memory.audit
    found = await events.list(token_id, session=session, type_=type, after_id=after, limit=limit)
    return {
        "data": [
            {
                "id": e.id,
                "type": e.type,
                "user": e.user,
                "session": e.session,
                "request_id": e.request_id,
                "data": e.data,
                "created_at": iso_utc(e.created_at),
            }
            for e in found
        ]
    }
