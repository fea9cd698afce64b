"""Tokens: list, create (the secret shown once), edit the config, rotate, delete or purge.

Every step goes through `lifecycle.tokens`, as the admin API does: the same validation and
the same messages. Secrets are masked wherever a config is shown.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from sqlalchemy import Connection, distinct, func, select
from starlette.responses import Response

from memory_bridge.core.errors import ProxyError
from memory_bridge.http.console import session as auth
from memory_bridge.http.console.views import PAGE, offset_of, page, redirect
from memory_bridge.http.services import services_of
from memory_bridge.lifecycle import tokens as token_admin
from memory_bridge.storage.console_sessions import ConsoleSession
from memory_bridge.storage.tables import curated, memory_events, messages
from memory_bridge.tenancy.secrets import mask_secrets

router = APIRouter(prefix="/tokens")
Signed = Annotated[ConsoleSession, Depends(auth.current)]
TokenId = Annotated[int, Path(ge=1, le=2**31 - 1)]


def _json(raw: str) -> object:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ProxyError(400, "invalid_request_error", f"The config is not JSON: {exc}") from None


def _masked(body: str) -> str:
    """The form back as typed, but its keys masked: a page never shows a secret again."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(parsed, dict):
        return body
    return json.dumps(mask_secrets(parsed), indent=2, ensure_ascii=False)


@router.get("")
async def list_tokens(request: Request, session: Signed) -> Response:
    memory = services_of(request).memory
    offset = offset_of(request)
    records = await memory.tokens.list(PAGE + 1, offset)
    rows = [token_admin.detail(r, memory.sources) for r in records[:PAGE]]
    return page(
        request,
        "tokens.html",
        session,
        tokens=rows,
        offset=offset,
        has_more=len(records) > PAGE,
        size=PAGE,
    )


@router.get("/new")
async def new_token(request: Request, session: Signed) -> Response:
    example = {
        "name": "support-bot",
        "llm_base_url": "https://api.openai.com/v1",
        "llm_api_key": "",
    }
    return page(request, "token_new.html", session, body=json.dumps(example, indent=2))


@router.post("/new")
async def create_token(request: Request, session: Signed) -> Response:
    form = await auth.checked_form(request, session.csrf)
    body = auth.text(form, "config")
    validate = auth.text(form, "validate") == "on"
    runtime = services_of(request).memory
    try:
        record, secret = await token_admin.create_token(runtime, _json(body), validate=validate)
    except ProxyError as exc:
        return page(request, "token_new.html", session, 422, body=_masked(body), error=exc.message)
    return page(
        request, "token_secret.html", session, token_id=record.id, name=record.name, secret=secret
    )


@router.get("/{token_id}")
async def show_token(request: Request, session: Signed, token_id: TokenId) -> Response:
    return await _detail(request, session, token_id)


async def _detail(
    request: Request, session: ConsoleSession, token_id: int, status: int = 200, **extra: Any
) -> Response:
    memory = services_of(request).memory
    record = await memory.tokens.get(token_id)
    if record is None or record.is_admin:
        return page(request, "error.html", session, 404, error=f"No token with id {token_id}.")
    detail = token_admin.detail(record, memory.sources)
    extra.setdefault("patch", "{}")
    return page(request, "token.html", session, status, token=detail, **extra)


@router.post("/{token_id}/edit")
async def edit_token(request: Request, session: Signed, token_id: TokenId) -> Response:
    form = await auth.checked_form(request, session.csrf)
    patch = auth.text(form, "patch")
    validate = auth.text(form, "validate") == "on"
    try:
        await token_admin.update_token(
            services_of(request).memory, token_id, _json(patch), validate=validate
        )
    except ProxyError as exc:
        return await _detail(request, session, token_id, 422, patch=patch, error=exc.message)
    return await _detail(request, session, token_id, message="The config was saved.")


@router.post("/{token_id}/rotate")
async def rotate_token(request: Request, session: Signed, token_id: TokenId) -> Response:
    await auth.checked_form(request, session.csrf)
    try:
        secret = await token_admin.rotate_token(services_of(request).memory, token_id)
    except ProxyError as exc:
        return page(request, "error.html", session, exc.status, error=exc.message)
    return page(
        request,
        "token_secret.html",
        session,
        token_id=token_id,
        name="",
        secret=secret,
        rotated=True,
    )


def _held(token_id: int) -> Any:
    def read(conn: Connection) -> dict[str, int]:
        def one(query: Any) -> int:
            return int(conn.execute(query).scalar() or 0)

        return {
            "stored messages": one(select(func.count()).where(messages.c.token_id == token_id)),
            "end users": one(
                select(func.count(distinct(messages.c.user_id))).where(
                    messages.c.token_id == token_id
                )
            ),
            "memory events": one(select(func.count()).where(memory_events.c.token_id == token_id)),
            "curated documents": one(select(func.count()).where(curated.c.token_id == token_id)),
        }

    return read


@router.get("/{token_id}/delete")
async def confirm_delete(request: Request, session: Signed, token_id: TokenId) -> Response:
    memory = services_of(request).memory
    record = await memory.tokens.get(token_id)
    if record is None or record.is_admin:
        return page(request, "error.html", session, 404, error=f"No token with id {token_id}.")
    held = await memory.db.run(_held(token_id))
    return page(
        request, "token_delete.html", session, token_id=token_id, name=record.name, held=held
    )


@router.post("/{token_id}/delete")
async def delete_token(request: Request, session: Signed, token_id: TokenId) -> Response:
    form = await auth.checked_form(request, session.csrf)
    purge = auth.text(form, "purge") == "on"
    services = services_of(request)
    try:
        await token_admin.delete_token(
            services.memory, token_id, purge=purge, traces=services.traces
        )
    except ProxyError as exc:
        return page(request, "error.html", session, exc.status, error=exc.message)
    return redirect("/console/tokens")
