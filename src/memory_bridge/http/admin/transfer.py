"""Admin API: export a token's memory events as NDJSON, and import an export into a token
(docs/operations.md, "Export and import")."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import StreamingResponse

from memory_bridge.core.errors import ProxyError, invalid_request
from memory_bridge.http.admin.schemas import (
    BODY_ERRORS,
    TokenId,
    error_responses,
)
from memory_bridge.http.services import services_of
from memory_bridge.lifecycle.export import export_lines, start_export
from memory_bridge.lifecycle.import_lines import ImportBounds, stage
from memory_bridge.lifecycle.importer import import_staged
from memory_bridge.lifecycle.transfer import (
    CLASS_PATTERN,
    MEDIA_TYPE,
    UnknownClass,
    install_id,
    parse_classes,
)
from memory_bridge.sources.services import MemoryServices

router = APIRouter(
    prefix="/tokens/{token_id}",
    tags=["export and import"],
)

Include = Annotated[
    str,
    Query(
        max_length=100,
        pattern=CLASS_PATTERN,
        description="Content classes to export, comma-separated: `curated`, `longterm`, "
        "`sessions` (the raw conversation history). None: the header alone.",
        examples=["curated,longterm"],
    ),
]
Mask = Annotated[
    bool,
    Query(description="Scrub e-mail addresses, phone and card numbers and credentials."),
]


class ImportAnswer(BaseModel):
    imported: int = Field(description="Events appended to the token.")
    skipped: int = Field(description="Events the token already held (by their origin id).")
    counts: dict[str, int] = Field(description="Imported events per type.")
    jobs: dict[str, int] = Field(description="Index jobs enqueued per consumer.")


_EXPORTED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A header line, then one line per event (docs/operations.md).",
        "content": {MEDIA_TYPE: {"schema": {"type": "string"}}},
    }
}
_LINES = {"schema": {"type": "string", "pattern": r"^[^\x00]*$"}}
_NDJSON_BODY = {
    "requestBody": {
        "required": True,
        "description": "An export of `GET …/export`: its header line, then event lines. "
        "Any content type is read as NDJSON.",
        "content": {MEDIA_TYPE: _LINES, "text/plain": _LINES},
    }
}


async def _token(runtime: MemoryServices, token_id: int) -> None:
    if await runtime.tokens.get(token_id) is None:
        raise ProxyError(404, "not_found_error", f"No token with id {token_id}.")


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={**error_responses(404), **_EXPORTED},
)
async def export_token(
    request: Request, token_id: TokenId, include: Include = "", mask: Mask = False
) -> StreamingResponse:
    """Stream the token's memory events as NDJSON: a header (format, version, source
    install, counts per class), then the events of the classes asked for. Audited. The
    token's config is never part of it."""
    try:
        classes = parse_classes(include)
    except UnknownClass as exc:
        raise invalid_request(str(exc)) from None
    runtime: MemoryServices = services_of(request).memory
    await _token(runtime, token_id)
    install = await asyncio.to_thread(install_id, runtime.settings.memory_bridge_data_dir)
    export = await start_export(
        runtime.db,
        runtime.audit,
        token_id,
        classes,
        mask=mask,
        install=install,
        request_id=request.state.request_id,
    )
    filename = f"memory-bridge-token-{token_id}.ndjson"
    return StreamingResponse(
        export_lines(runtime.db, export),
        media_type=MEDIA_TYPE,
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.post(
    "/import",
    response_model=ImportAnswer,
    responses=error_responses(404, 409, *BODY_ERRORS),
    openapi_extra=_NDJSON_BODY,
)
async def import_token(request: Request, token_id: TokenId) -> dict[str, Any]:
    """Append an export's events to this token: all or nothing (a bad line is a 422 naming
    it), idempotent by event (importing twice changes nothing), history and curated documents
    at once, episodic memory indexed by the job queue after."""
    runtime: MemoryServices = services_of(request).memory
    await _token(runtime, token_id)
    staging = runtime.settings.memory_bridge_data_dir / "imports"
    staged = await stage(request.stream(), staging, ImportBounds.of(runtime.settings))
    try:
        result = await import_staged(runtime, token_id, staged, request_id=request.state.request_id)
    finally:
        await asyncio.to_thread(staged.discard)
    worker = services_of(request).worker
    if worker is not None and result.jobs:
        worker.wake()
    return result.as_json()
