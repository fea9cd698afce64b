"""The admin API: service tokens and their configuration. Secrets are shown once, then masked."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import JSONResponse, Response

from memory_bridge.errors import ProxyError, invalid_request
from memory_bridge.events import log as event_log
from memory_bridge.http.admin_schemas import (
    ADMIN_BEARER,
    BODY_ERRORS,
    CreatedToken,
    RotatedToken,
    TokenDetail,
    TokenId,
    TokenList,
    error_responses,
    json_body,
    parse_json_body,
)
from memory_bridge.http.auth import require_admin
from memory_bridge.runtime import Runtime
from memory_bridge.sources.base import MemorySource
from memory_bridge.storage.events import EventLog
from memory_bridge.storage.tokens import TokenRecord, TokenStore
from memory_bridge.tenancy.config import TokenConfigError, merge_patch, validate_config
from memory_bridge.tenancy.memory_config import PASSTHROUGH_STATUS, DegradedWarning
from memory_bridge.tenancy.secrets import mask_secrets

log = logging.getLogger(__name__)
# The edge already refused anything but the admin token; `require_admin` is the second lock.
router = APIRouter(
    prefix="/v1/admin",
    tags=["tokens"],
    dependencies=[Depends(require_admin), ADMIN_BEARER],
    responses=error_responses(),
)


# Shown in /docs (and sent by the fuzzing test's examples phase).
_EXAMPLES: dict[str, dict[str, Any]] = {
    "create": {
        "name": "support-bot",
        "llm_base_url": "https://api.openai.com/v1",
        "llm_api_key": "sk-proj-...",
        "session_window_size": 30,
    },
    "update": {"session_window_size": 10, "memory_prompt": None},
}


def _tokens(request: Request) -> TokenStore:
    store: TokenStore = request.app.state.tokens
    return store


async def _json_body(request: Request) -> object:
    return parse_json_body(await request.body())


def _not_found(token_id: int) -> ProxyError:
    return ProxyError(404, "not_found_error", f"No token with id {token_id}.")


def detail(record: TokenRecord, sources: tuple[MemorySource, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": record.id,
        "name": record.name,
        "created_at": record.created_at.isoformat() if record.created_at else None,
        "updated_at": record.updated_at.isoformat() if record.updated_at else None,
    }
    if record.config is None:
        out["config"] = None
        out["config_error"] = record.config_error
        out["usable"] = False
    else:
        out["config"] = mask_secrets(record.config.model_dump(exclude_none=True))
        out["usable"] = True
        off = record.config.memory_config.passthrough
        out["memory_layers"] = {
            s.name: PASSTHROUGH_STATUS if off else s.describe(record.config) for s in sources
        }
    return out


@router.post(
    "/tokens",
    status_code=201,
    response_model=CreatedToken,
    responses=error_responses(*BODY_ERRORS),
    openapi_extra=json_body(
        "A complete token config (docs/configuration.md).", _EXAMPLES["create"]
    ),
)
async def create_token(request: Request) -> JSONResponse:
    try:
        config = validate_config(await _json_body(request))
    except TokenConfigError as exc:
        raise invalid_request(str(exc)) from None
    record, secret = await _tokens(request).create(config)
    log.info("token %d created (%s)", record.id, record.name)
    degraded: DegradedWarning = request.app.state.degraded_warning
    degraded.check(record.id, config.memory_config)
    body = {**detail(record, request.app.state.sources), "token": secret}
    return JSONResponse(body, status_code=201)


@router.get("/tokens", response_model=TokenList, response_model_exclude_unset=True)
async def list_tokens(request: Request) -> dict[str, Any]:
    records = await _tokens(request).list()
    return {"data": [detail(r, request.app.state.sources) for r in records]}


@router.get(
    "/tokens/{token_id}",
    response_model=TokenDetail,
    response_model_exclude_unset=True,
    responses=error_responses(404),
)
async def get_token(request: Request, token_id: TokenId) -> dict[str, Any]:
    record = await _tokens(request).get(token_id)
    if record is None:
        raise _not_found(token_id)
    return detail(record, request.app.state.sources)


@router.patch(
    "/tokens/{token_id}",
    response_model=TokenDetail,
    response_model_exclude_unset=True,
    responses=error_responses(404, *BODY_ERRORS),
    openapi_extra=json_body(
        "Fields to change; null clears an optional field (a token whose stored config is "
        "unusable needs a complete one).",
        _EXAMPLES["update"],
        partial=True,
    ),
)
async def update_token(request: Request, token_id: TokenId) -> dict[str, Any]:
    store = _tokens(request)
    record = await store.get(token_id)
    if record is None:
        raise _not_found(token_id)
    patch = await _json_body(request)
    try:
        # A row whose stored config went bad is repaired by sending a complete config.
        if record.config is None:
            config = validate_config(patch)
        else:
            config = merge_patch(record.config, patch)
    except TokenConfigError as exc:
        raise invalid_request(str(exc)) from None
    updated = await store.update(token_id, config)
    if updated is None:
        raise _not_found(token_id)
    log.info("token %d updated", token_id)
    return detail(updated, request.app.state.sources)


@router.delete(
    "/tokens/{token_id}", status_code=204, response_class=Response, responses=error_responses(404)
)
async def delete_token(
    request: Request,
    token_id: TokenId,
    purge: bool = Query(
        default=False, description="Also delete its history, documents, memories and events."
    ),
) -> Response:
    if not await _tokens(request).delete(token_id):
        raise _not_found(token_id)
    if purge:
        sources: tuple[MemorySource, ...] = request.app.state.sources
        for source in sources:
            await source.purge(token_id)
        events: EventLog = request.app.state.events
        await events.purge(token_id)
        runtime: Runtime = request.app.state.runtime
        await runtime.db.write(lambda conn: event_log.purge(conn, token_id))
    log.info("token %d deleted%s", token_id, " and purged" if purge else "")
    return Response(status_code=204)


@router.post(
    "/tokens/{token_id}/rotate", response_model=RotatedToken, responses=error_responses(404)
)
async def rotate_token(request: Request, token_id: TokenId) -> dict[str, Any]:
    secret = await _tokens(request).rotate(token_id)
    if secret is None:
        raise _not_found(token_id)
    log.info("token %d rotated", token_id)
    return {"id": token_id, "token": secret}
