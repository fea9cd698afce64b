"""The admin API: service tokens and their configuration. Secrets are shown once, then masked."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.responses import JSONResponse, Response

from memory_bridge.http.admin.schemas import (
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
from memory_bridge.http.services import services_of
from memory_bridge.lifecycle import tokens as token_admin
from memory_bridge.lifecycle.rebuild import reindex_state
from memory_bridge.sources.services import MemoryServices

# The edge already refused anything but the admin token; `require_admin` is the second lock.
router = APIRouter(
    tags=["tokens"],
)


# In /openapi.json (and sent by the fuzzing test's examples phase).
_EXAMPLES: dict[str, dict[str, Any]] = {
    "create": {
        "name": "support-bot",
        "llm_base_url": "https://api.openai.com/v1",
        "llm_api_key": "sk-proj-...",
        "session_window_size": 30,
    },
    "update": {"session_window_size": 10, "memory_prompt": None},
}


def _runtime(request: Request) -> MemoryServices:
    runtime: MemoryServices = services_of(request).memory
    return runtime


async def _json_body(request: Request) -> object:
    return parse_json_body(await request.body())


# `?validate=false` saves a config without the checks of whether its long-term memory can work
# (the local extra installed, the embedder and memory LLM answering a probe).
ValidateParam = Annotated[
    bool,
    Query(
        description="Check that the long-term memory settings can work (the local embedder "
        "installed; the embedder and memory LLM answer a short probe) and refuse them with "
        "422 otherwise. false saves them unchecked (a host down for maintenance)."
    ),
]


@router.post(
    "/tokens",
    status_code=201,
    response_model=CreatedToken,
    responses=error_responses(*BODY_ERRORS),
    openapi_extra=json_body(
        "A complete token config (docs/configuration.md).", _EXAMPLES["create"]
    ),
)
async def create_token(request: Request, validate: ValidateParam = True) -> JSONResponse:
    runtime = _runtime(request)
    body = await _json_body(request)
    record, secret = await token_admin.create_token(runtime, body, validate=validate)
    detail = {**token_admin.detail(record, runtime.sources), "token": secret}
    return JSONResponse(detail, status_code=201)


@router.get("/tokens", response_model=TokenList, response_model_exclude_unset=True)
async def list_tokens(request: Request) -> dict[str, Any]:
    memory = services_of(request).memory
    records = await memory.tokens.list()
    return {"data": [token_admin.detail(r, memory.sources) for r in records]}


@router.get(
    "/tokens/{token_id}",
    response_model=TokenDetail,
    response_model_exclude_unset=True,
    responses=error_responses(404),
)
async def get_token(request: Request, token_id: TokenId) -> dict[str, Any]:
    memory = services_of(request).memory
    record = await memory.tokens.get(token_id)
    if record is None:
        raise token_admin.not_found(token_id)
    return await _with_reindex(request, token_admin.detail(record, memory.sources))


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
async def update_token(
    request: Request, token_id: TokenId, validate: ValidateParam = True
) -> dict[str, Any]:
    runtime = _runtime(request)
    patch = await _json_body(request)
    updated = await token_admin.update_token(runtime, token_id, patch, validate=validate)
    return await _with_reindex(request, token_admin.detail(updated, runtime.sources))


async def _with_reindex(request: Request, detail: dict[str, Any]) -> dict[str, Any]:
    """A token's rebuild or re-embed state, when it has one (`GET .../rebuild` in full)."""
    if detail.get("usable"):
        state = await reindex_state(services_of(request).memory, detail["id"])
        if state is not None:
            detail["reindex"] = state
    return detail


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
    traces = services_of(request).traces
    await token_admin.delete_token(_runtime(request), token_id, purge=purge, traces=traces)
    return Response(status_code=204)


@router.post(
    "/tokens/{token_id}/rotate", response_model=RotatedToken, responses=error_responses(404)
)
async def rotate_token(request: Request, token_id: TokenId) -> dict[str, Any]:
    secret = await token_admin.rotate_token(_runtime(request), token_id)
    return {"id": token_id, "token": secret}
