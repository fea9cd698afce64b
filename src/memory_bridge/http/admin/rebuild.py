"""Admin API to rebuild a token's vectors from the event log (docs/admin-api.md).

`POST` starts the rebuild as a job of the durable queue and answers at once (202); `GET`
reports it: state, done/total turns replayed, the active shard and the one being filled.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from memory_bridge.core.errors import ProxyError
from memory_bridge.http.admin.schemas import TokenId, error_responses
from memory_bridge.http.services import services_of
from memory_bridge.lifecycle.rebuild import layers_of, reindex_state, start_rebuild
from memory_bridge.lifecycle.reextract import start_reextract
from memory_bridge.lifecycle.tokens import not_found
from memory_bridge.sources.services import MemoryServices
from memory_bridge.sources.vector_generations import LONGTERM

router = APIRouter(
    prefix="/tokens/{token_id}/rebuild",
    tags=["rebuild"],
)
Layer = Literal["episodic", "longterm", "all"]


class Shard(BaseModel):
    model: str
    dims: int


class LayerRebuild(BaseModel):
    state: Literal["idle", "running", "failed"] = Field(
        description="running: a rebuild fills `target` while recall reads `active`."
    )
    reason: str | None = Field(
        description="rebuild (asked for), reembed (embedder changed) or import (facts imported)."
    )
    done: int = Field(description="Turns (episodic) or fact events (longterm) replayed so far.")
    total: int = Field(description="Of those in the log when the rebuild (re)started.")
    active: Shard
    target: Shard | None
    error: str | None


class RebuildState(BaseModel):
    layers: dict[str, LayerRebuild] = Field(
        description="Per layer; absent: never rebuilt (generation 0 of its embedder)."
    )
    reextract_turns: int | None = Field(
        default=None,
        description="With `reextract=true`: the stored turns whose facts the memory LLM "
        "extracts again (one job each of the `longterm` consumer: `GET .../jobs`).",
    )


async def _state(runtime: MemoryServices, token_id: int) -> dict[str, Any]:
    return {"layers": await reindex_state(runtime, token_id) or {}}


@router.post(
    "",
    status_code=202,
    response_model=RebuildState,
    responses=error_responses(404, 409, 422),
)
async def start(
    request: Request,
    token_id: TokenId,
    layer: Annotated[Layer, Query(description="The layer to rebuild (all: both).")] = "episodic",
    reextract: Annotated[
        bool,
        Query(
            description="longterm or all only: run the memory LLM again over every stored "
            "turn instead of restoring the facts from their events (one LLM call per turn)."
        ),
    ] = False,
) -> dict[str, Any]:
    """Rebuild the layer's vectors from the event log into a new shard, then switch to it
    (recall reads the old shard until then; the old one is dropped after). The long-term
    layer's facts are re-embedded from their `longterm.*` events: no memory LLM call; with
    `reextract=true` they are deleted and extracted again from the stored turns, in place, by
    the `longterm` consumer's jobs. 409 while one runs, or when the token has no such layer
    (`all`: the layers it has); 422 for `reextract` with the episodic layer."""
    if reextract and layer not in (LONGTERM, "all"):
        raise ProxyError(
            422, "invalid_request_error", "reextract applies to the longterm layer (or all)."
        )
    runtime: MemoryServices = services_of(request).memory
    worker = services_of(request).worker
    wake = worker.wake if worker else None
    layers = await layers_of(runtime, token_id, layer)
    if reextract and LONGTERM not in layers:
        raise ProxyError(409, "conflict_error", "The token has no long-term memory.")
    turns = None
    for name in layers:
        if reextract and name == LONGTERM:
            turns = await start_reextract(runtime, token_id, wake=wake)
        else:
            await start_rebuild(runtime, token_id, name, wake=wake)
    return {**await _state(runtime, token_id), "reextract_turns": turns}


@router.get("", response_model=RebuildState, responses=error_responses(404))
async def state(request: Request, token_id: TokenId) -> dict[str, Any]:
    """The layers' rebuild state: poll it for done/total."""
    runtime: MemoryServices = services_of(request).memory
    if await runtime.tokens.get(token_id) is None:
        raise not_found(token_id)
    return await _state(runtime, token_id)
