"""Admin API for a token's long-term memories (Mem0): list, search, get, delete; the facts
consolidation superseded (`include=superseded`) and their restore.

`user` selects a namespace: absent → every namespace of the token; `user=` (empty) → the
token-wide memories (requests without an end user); `user=alice` → that end user's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from memory_bridge.core.errors import ProxyError
from memory_bridge.http.admin.schemas import (
    MemoryHits,
    MemoryId,
    MemoryItem,
    MemoryPage,
    TokenId,
    error_responses,
    label_query,
)
from memory_bridge.http.services import services_of
from memory_bridge.lifecycle.forget import delete_facts
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.consolidator import Consolidator
from memory_bridge.sources.longterm.points import StoredMemory
from memory_bridge.sources.longterm.source import LayerOff, LongTermMemory
from memory_bridge.storage.tokens import TokenStore
from memory_bridge.tenancy.config import TokenConfig, config_secrets
from memory_bridge.tenancy.secrets import scrub

log = logging.getLogger(__name__)
router = APIRouter(
    prefix="/tokens/{token_id}/memories",
    tags=["long-term memories"],
    # Unknown token 404, layer off or misconfigured 409, the memory backend failing 502.
    responses=error_responses(404, 409, 502),
)
UserParam = Annotated[str | None, label_query("End user; empty for token-wide; absent for all.")]
# A page never reaches past what one token can hold; the bound keeps the slice arithmetic small.
MAX_OFFSET = 1_000_000


async def _config(request: Request, token_id: int) -> TokenConfig:
    tokens: TokenStore = services_of(request).memory.tokens
    record = await tokens.get(token_id)
    if record is None:
        raise ProxyError(404, "not_found_error", f"No token with id {token_id}.")
    if record.config is None:
        raise ProxyError(409, "conflict_error", f"Token {token_id} has no usable config.")
    if not mem0_config.enabled(record.config):
        raise _off(token_id)
    return record.config


def _off(token_id: int) -> ProxyError:
    return ProxyError(409, "conflict_error", f"Long-term memory is off for token {token_id}.")


def _longterm(request: Request) -> LongTermMemory:
    source: LongTermMemory = services_of(request).memory.longterm
    return source


@contextlib.contextmanager
def _errors_mapped(token_id: int, config: TokenConfig) -> Iterator[None]:
    """The memory backend's failures as the admin API's errors (404/409/502), scrubbed."""
    try:
        yield
    except Exception as exc:
        raise _failure(token_id, config, exc) from None


def _failure(token_id: int, config: TokenConfig, exc: Exception) -> ProxyError:
    if isinstance(exc, LayerOff):
        return _off(token_id)
    if isinstance(exc, mem0_config.Mem0ConfigError):
        return ProxyError(409, "conflict_error", f"Long-term memory is misconfigured: {exc}")
    log.warning(
        "admin long-term memory call failed: %s: %s",
        type(exc).__name__,
        scrub(exc, config_secrets(config)),
    )
    return ProxyError(502, "memory_unavailable", f"Long-term memory failed ({type(exc).__name__}).")


def _item(token_id: int, memory: StoredMemory) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": memory.id,
        "memory": memory.text,
        "user": mem0_config.end_user(token_id, memory.namespace),
        "created_at": memory.created_at,
        "updated_at": memory.updated_at,
    }
    if memory.score is not None:
        out["score"] = memory.score
    return out


@router.get("", response_model=MemoryPage, response_model_exclude_unset=True)
async def list_memories(
    request: Request,
    token_id: TokenId,
    user: UserParam = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Page size.")] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Items to skip.")] = 0,
    include: Annotated[
        Literal["superseded"] | None,
        Query(description="`superseded`: also the facts newer ones superseded."),
    ] = None,
) -> dict[str, Any]:
    config = await _config(request, token_id)
    longterm = _longterm(request)
    with _errors_mapped(token_id, config):
        found = await longterm.list_memories(token_id, config, user)
    page = found[offset : offset + limit]
    out: dict[str, Any] = {
        "data": [_item(token_id, m) for m in page],
        "total": len(found),
        "limit": limit,
        "offset": offset,
    }
    if include == "superseded":
        out["superseded"] = await longterm.facts.superseded_facts(token_id, user)
    return out


@router.post("/{memory_id:uuid}/restore", response_model=MemoryItem)
async def restore_memory(request: Request, token_id: TokenId, memory_id: MemoryId) -> Any:
    """Put a superseded fact back among the live ones (a `longterm.restored` event)."""
    config = await _config(request, token_id)
    longterm = _longterm(request)
    with _errors_mapped(token_id, config):
        restored = await Consolidator(longterm).restore(token_id, config, str(memory_id))
        found = await longterm.get(token_id, config, str(memory_id)) if restored else None
    if found is None:
        raise ProxyError(
            404, "not_found_error", f"No superseded memory {memory_id} for token {token_id}."
        )
    log.info("token %d: long-term memory %s restored", token_id, memory_id)
    return _item(token_id, found)


@router.get("/search", response_model=MemoryHits, response_model_exclude_unset=True)
async def search_memories(
    request: Request,
    token_id: TokenId,
    query: Annotated[
        str, Query(min_length=1, max_length=4000, description="What to look for; not blank.")
    ],
    user: UserParam = None,
    limit: Annotated[int, Query(ge=1, le=100, description="At most this many hits.")] = 10,
) -> dict[str, Any]:
    config = await _config(request, token_id)
    if not query.strip():
        raise ProxyError(422, "invalid_request_error", "query: must not be blank")
    with _errors_mapped(token_id, config):
        found = await _longterm(request).search(token_id, config, query, user, limit)
    return {"data": [_item(token_id, m) for m in found]}


@router.get("/{memory_id:uuid}", response_model=MemoryItem, response_model_exclude_unset=True)
async def get_memory(request: Request, token_id: TokenId, memory_id: MemoryId) -> dict[str, Any]:
    config = await _config(request, token_id)
    with _errors_mapped(token_id, config):
        found = await _longterm(request).get(token_id, config, str(memory_id))
    if found is None:
        raise ProxyError(404, "not_found_error", f"No memory {memory_id} for token {token_id}.")
    return _item(token_id, found)


@router.delete("/{memory_id:uuid}", status_code=204, response_class=Response)
async def delete_memory(request: Request, token_id: TokenId, memory_id: MemoryId) -> Response:
    config = await _config(request, token_id)
    services = services_of(request)
    with _errors_mapped(token_id, config):
        deleted = await _longterm(request).delete(token_id, config, str(memory_id))
        if deleted is not None:
            await delete_facts(services.memory, token_id, config, [deleted], traces=services.traces)
    if deleted is None:
        raise ProxyError(404, "not_found_error", f"No memory {memory_id} for token {token_id}.")
    log.info("token %d: long-term memory %s deleted", token_id, memory_id)
    return Response(status_code=204)


@router.delete("", status_code=204, response_class=Response)
async def delete_memories(request: Request, token_id: TokenId, user: UserParam = None) -> Response:
    config = await _config(request, token_id)
    services = services_of(request)
    with _errors_mapped(token_id, config):
        gone = await _longterm(request).delete_all(token_id, config, user)
        await delete_facts(services.memory, token_id, config, gone, traces=services.traces)
    which = "all namespaces" if user is None else ("token-wide" if not user else "one end user")
    log.info("token %d: long-term memories deleted (%s)", token_id, which)
    return Response(status_code=204)
