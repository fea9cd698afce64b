"""Endpoints forwarded to the token's upstream as they are, so a whole `base_url` can point here."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from memory_bridge.chat.upstream import Upstream, passthrough
from memory_bridge.http.edge import principal_of
from memory_bridge.http.services import services_of

router = APIRouter()


async def _forward(request: Request, path: str) -> Response:
    principal = principal_of(request.scope)
    assert principal.config is not None
    upstream: Upstream = services_of(request).upstream
    body = await request.body()
    headers = upstream.request_headers(principal.config, request.headers, json_body=bool(body))
    url = principal.config.api_url(path)
    if request.url.query:
        url += "?" + request.url.query
    reply = await upstream.fetch(request.method, url, headers, body or None)
    return passthrough(reply)


@router.get("/v1/models")
async def models(request: Request) -> Response:
    return await _forward(request, "models")


@router.post("/v1/embeddings")
async def embeddings(request: Request) -> Response:
    return await _forward(request, "embeddings")
