"""Export a token's memory as NDJSON (a download) and import an export into a token (an
upload): the admin API's export and import (`lifecycle.export`, `lifecycle.importer`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from starlette.datastructures import UploadFile
from starlette.responses import Response, StreamingResponse

from memory_bridge.core.errors import ProxyError
from memory_bridge.core.request_context import request_id_var
from memory_bridge.http.console import session as auth
from memory_bridge.http.console.views import page
from memory_bridge.http.services import services_of
from memory_bridge.lifecycle.export import export_lines, start_export
from memory_bridge.lifecycle.import_lines import ImportBounds, stage
from memory_bridge.lifecycle.importer import import_staged
from memory_bridge.lifecycle.transfer import CLASSES, MEDIA_TYPE, install_id
from memory_bridge.storage.console_sessions import ConsoleSession

router = APIRouter(prefix="/tokens/{token}")
Signed = Annotated[ConsoleSession, Depends(auth.current)]
TokenP = Annotated[int, Path(ge=1, le=2**31 - 1)]
_CHUNK = 1 << 16


@router.get("/transfer")
async def transfer(request: Request, session: Signed, token: TokenP) -> Response:
    if await services_of(request).memory.tokens.get(token) is None:
        return page(request, "error.html", session, 404, error=f"No token with id {token}.")
    return page(request, "transfer.html", session, token=token, classes=list(CLASSES))


@router.get("/export")
async def export(request: Request, session: Signed, token: TokenP) -> Response:
    runtime = services_of(request).memory
    if await runtime.tokens.get(token) is None:
        return page(request, "error.html", session, 404, error=f"No token with id {token}.")
    classes = tuple(name for name in CLASSES if request.query_params.get(name) == "on")
    install = await asyncio.to_thread(install_id, runtime.settings.memory_bridge_data_dir)
    started = await start_export(
        runtime.db,
        runtime.audit,
        token,
        classes,
        mask=request.query_params.get("mask") == "on",
        install=install,
        request_id=request_id_var.get(),
    )
    filename = f"memory-bridge-token-{token}.ndjson"
    return StreamingResponse(
        export_lines(runtime.db, started),
        media_type=MEDIA_TYPE,
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


async def _chunks(upload: UploadFile) -> AsyncIterator[bytes]:
    while chunk := await upload.read(_CHUNK):
        yield chunk


@router.post("/import")
async def import_upload(request: Request, session: Signed, token: TokenP) -> Response:
    form = await auth.checked_form(request, session.csrf, files=1)
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        return page(request, "error.html", session, 422, error="Choose an export file.")
    services = services_of(request)
    staging = services.settings.memory_bridge_data_dir / "imports"
    try:
        staged = await stage(_chunks(upload), staging, ImportBounds.of(services.settings))
        try:
            result = await import_staged(
                services.memory, token, staged, request_id=request_id_var.get()
            )
        finally:
            await asyncio.to_thread(staged.discard)
    except ProxyError as exc:
        return page(request, "error.html", session, exc.status, error=exc.message)
    finally:
        await upload.close()
    if services.worker is not None and result.jobs:
        services.worker.wake()
    return page(request, "imported.html", session, token=token, result=result.as_json())
